// Package mcphttp deduplicates MCP tools/call on the Streamable HTTP
// transport: a client that resends a call whose response it never got (the
// connection dropped after the server ran the tool) gets the recorded
// response instead of a second execution.
//
// [New] wraps any Streamable HTTP handler, such as go-sdk's
// mcp.NewStreamableHTTPHandler:
//
//	handler := mcphttp.New(store, mcphttp.Options{Principal: userOf})(mcp.NewStreamableHTTPHandler(getServer, nil))
//
// Only a POST whose body is one JSON-RPC request with an id, for a method in
// [Options.Methods] (tools/call), is deduplicated; everything else passes
// through unbuffered. The inner handler gets every body intact. What the inner
// handler would reject is never answered from the store. How the wrapper
// reads, keys, records and answers calls: [design.md, "The MCP adapter"];
// the guarantees and their tests: [reliability.md].
//
// # Keys
//
// A call's key comes from [SourceMeta] (_meta.idempotencyKey, see
// [agentkey.Derive]), [SourceParams], [SourceHeader] or [SourceParamHeader];
// sources that disagree are refused. It is scoped by [Options.Principal],
// else the credentials, plus _meta.sessionId; the same key for another tool
// or arguments is [CodeKeyReused]. A keyless call is keyed by session, id,
// tool and arguments before [SessionlessProtocol] (not with
// [Options.Stateless]), and not deduplicated from it on.
// [Options.NewKeyGuard] notices agents minting a new key per retry. A replay
// is the recorded response under the retry's id, with the Idempotent-Replayed
// header and [ReplayedMetaKey] in its _meta; a duplicate of a call in flight
// waits up to Options.Engine.Wait, then gets [CodeInFlight].
//
// # Cancellation, closed sessions, cut-offs
//
// A keyed call runs on when its client drops the stream and is recorded for
// the retry; Options.Engine.CancelWithClient instead cancels it and releases
// the key ([design.md, "Cancellation and closed streams"]). A session's
// DELETE waits up to Options.Engine.Wait for its deduplicated calls, so a
// retry from a new session replays their answers. A call the engine cuts off
// learns it through notifications/cancelled, [ToolCancellation] or
// [WorkContext]; what it still answers is recorded; one answering nothing
// within a lease gets [CodeInFlight] with [ReasonCutOff] ([design.md, "MCP
// calls cut off"]).
//
// # Upstream calls
//
// A tool forwards _meta.sessionId and the call's key, bound to the caller
// ([DerivedKeyHeader]), so the upstream dedupes too: [FromCallToolRequest]
// reads them, [Transport] sets them, with credentials only for
// [Transport.Upstreams] ([design.md, "Forwarding credentials upstream"]).
//
// # Errors
//
// The wrapper's own errors are [CodeKeyReused], [CodeInFlight],
// [CodeUnreplayable], [CodeUnavailable] (-31090..-31093), [CodeInvalidParams]
// and [CodeInvalidRequest], with data.reason and, for the first two,
// data.type. It advertises itself as [ExtensionID]. An unreachable store
// means the call does not run.
//
// [design.md, "The MCP adapter"]: https://github.com/idemkit/idem/blob/main/docs/design.md#the-mcp-adapter-package-mcphttp
// [design.md, "Cancellation and closed streams"]: https://github.com/idemkit/idem/blob/main/docs/design.md#cancellation-and-closed-streams
// [design.md, "MCP calls cut off"]: https://github.com/idemkit/idem/blob/main/docs/design.md#mcp-calls-cut-off
// [design.md, "Forwarding credentials upstream"]: https://github.com/idemkit/idem/blob/main/docs/design.md#forwarding-credentials-upstream
// [reliability.md]: https://github.com/idemkit/idem/blob/main/docs/reliability.md#mcp
package mcphttp
