// Package mcphttp deduplicates MCP tools/call on the Streamable HTTP
// transport: a client that resends a call whose response it never got (the
// connection dropped after the server ran the tool) gets the recorded
// response instead of a second execution.
//
// [New] wraps any Streamable HTTP handler, such as go-sdk's
// mcp.NewStreamableHTTPHandler:
//
//	handler := mcphttp.New(store, mcphttp.Options{})(mcp.NewStreamableHTTPHandler(getServer, nil))
//
// # What is touched
//
// Only a POST whose body is a single JSON-RPC request, with an id, for a
// deduplicated method ([Options.Methods], by default tools/call). The
// wrapper reads the body to decide (at most [Options.MaxInspectBytes]) and
// gives the inner handler the body intact. Everything else passes straight
// through, unbuffered: initialize, notifications, the client's responses to
// server requests (sampling and elicitation replies reuse the id of the call
// still in flight, and must reach the server untouched), GET streams,
// DELETE, bodies that are not JSON (the inner handler owns the JSON-RPC
// error), longer bodies, and batches: a batch is not deduplicated, since
// its calls share one HTTP response and protocol revisions from 2025-06-18
// on do not allow batches at all.
//
// # Keys
//
// Every key lives in a scope: who is calling, plus the call's
// _meta.sessionId when it carries one (seed 003), as a keyed hash
// (HMAC-SHA-256 with [Options.ScopeSecret]; SHA-256 without one). Who is
// calling is the principal [Options.Principal] returns, else the
// credentials: the Authorization and X-Api-Key headers and the cookies
// named in [Options.SessionCookies]. A call that carries cookies but none of
// these, to a server that has not named its session cookies, is refused
// ([CodeInternalError], [ReasonUnscopedCookies]): the cookie may be the
// credential, and ignoring it would give one caller another's result.
// Callers without credentials share one identity, so between them a
// _meta.idempotencyKey is only as private as its value: one derived with
// [idem.AgentKey] from a secret session id is unguessable, "retry-1" is not.
//
// A call with params._meta.idempotencyKey is keyed by that key
// ([idem.ParseKey]). Its fingerprint is the tool name and the canonical
// arguments ([idem.CanonicalJSON]), so the same key with another tool or
// other arguments is answered with [CodeKeyReused] and not run. Because the
// transport's Mcp-Session-Id plays no part, a client that re-initializes
// after a server restart (its MCP session is gone) and retries with the same
// key still gets the replay.
//
// A call without one is keyed by seed 000's method-call key,
// [idem.KeyForMethodCall], from the Mcp-Session-Id, the request id, the
// method and a target made of the tool name and a digest of the arguments.
// The digest is in the key, not only in the fingerprint: JSON-RPC lets a
// client reuse an id once it was answered, and a different tool or other
// arguments under a reused id must run as a fresh call, never be answered
// with another call's result. With the digest only in the fingerprint, the
// store would report a mismatch instead. A call without Mcp-Session-Id (a
// stateless server) and without _meta.idempotencyKey is not deduplicated:
// request ids are only unique per session, and two clients' id 1 must not
// share a result.
//
// # Stream, never buffer
//
// The first call for a key claims it and runs through the inner handler.
// Its answer, an SSE stream or a JSON body, reaches the client as the inner
// handler writes and flushes it. The wrapper reads a copy as it passes,
// one message at a time (progress notifications, log messages and server
// requests interleaved on the stream are looked at and dropped), and keeps
// only the JSON-RPC response to the call's id, which it records as the
// [idem.Result] Body. A tool result, even one with isError, completes the
// key; a JSON-RPC error, or a rejection by the inner handler, releases it,
// so a retry runs again. A response larger than [Options.MaxRecordBytes]
// completes the key as unreplayable; a notification that large (a message
// naming a top-level "method" within its first MaxRecordBytes) is only
// dropped. An SSE stream that ends without the
// call's response (the session closed, or the server closed the stream for
// the client to resume it with a GET, SEP-1699) leaves the claim to its
// lease: the tool may still be running, and the response, delivered on a
// resumed stream, is one the wrapper never sees. Until the lease runs out a
// retry waits or gets [CodeInFlight]; after it, the retry runs again.
//
// The inner handler runs on a context that survives the client: go-sdk
// ends a call's stream when the HTTP request's context ends, and the
// client that dropped its connection is exactly the one that will retry.
// With the context detached, the inner handler keeps writing the call's
// response (the wrapper stops sending it to the gone client) and the
// wrapper records it for the retry. The claim, its renewal, the deadline
// that cancels the inner handler's context (cause [idem.ErrLeaseLost])
// before the lease could run out unrenewed, [Options.Shutdown], which
// endings are recorded and the retry delays are the shared behaviour of
// idem's adapters, built once in package [engine] and documented there.
// go-sdk runs a stateful session's tool handlers on the session's context,
// so for them a cancelled request context ends the call's stream, not the
// tool: when the engine cancels a call (lease lost, shutdown), the wrapper
// also sends the inner handler a notifications/cancelled for the call's id
// on the same session, as a client would, which cancels the tool. A
// stateless go-sdk server handles that notice in a fresh session, so there
// the tool runs on (a known gap). A tool that never ends keeps
// its request's goroutine, as it keeps go-sdk's own; a session that closes
// ends both.
//
// A replay is the recorded response with its id rewritten to the retry's id,
// framed as the inner handler frames its answers: an SSE "message" event or
// a JSON body, with the Idempotent-Replayed: true header.
//
// A duplicate of a call still in flight waits up to [Options.Wait]
// ([idem.ClaimWait]) and gets the replay; past the wait it gets
// [CodeInFlight], whose message says to retry. If the original released its
// claim in the meantime, the duplicate runs the call itself.
//
// # Order of checks
//
// Whatever the inner handler checks before running a call still decides
// first: a request it would reject is never answered from the store. go-sdk
// checks the Host header (DNS rebinding), cross-origin rules, the
// MCP-Protocol-Version header, Content-Type and Accept, the session (an
// unknown Mcp-Session-Id is 404, a session of another user 403), and
// rejects an id already in flight on the session; other servers check
// other things, and any of them can change between releases.
//
// So the wrapper does not copy those checks. A call that claims its key
// runs through the inner handler, which decides as always (a rejection
// releases the claim). A call the wrapper would answer itself (a replay, a
// wait, a reused key, an invalid key, an unavailable store) is first
// probed: the wrapper sends the inner handler the same HTTP request (method,
// URL, headers, credentials, context) with the body replaced by a ping
// under the same id and _meta, and captures the answer. Ping is the one
// request every MCP server answers, and it has no effect. Only if the inner
// handler answers the ping with a JSON-RPC result does the wrapper answer
// the call, in the framing the probe showed; otherwise the client gets the
// probe's answer, the inner handler's own rejection, byte for byte.
//
// # Seed 003: _meta upstream
//
// A tool that calls an upstream HTTP API forwards _meta.sessionId as
// X-Session-Id and _meta.idempotencyKey as X-Idempotency-Key, so the
// upstream can dedupe too. In a go-sdk tool handler, [FromCallToolRequest]
// returns both (go-sdk runs tool handlers on the session's context, not
// the request's, so the wrapper cannot pass them in a context). When _meta
// carries no key, the key the wrapper derived is forwarded instead (a hash
// of its scope and key, handed to the inner handler in [DerivedKeyHeader]).
// The caller's Authorization and X-Api-Key travel with them, as seed 003's
// generated servers forward them, but only to the upstream origins
// [Transport.Upstreams] names and never on a redirect to another origin:
// the upstream authenticates the same caller, and its own idem middleware
// scopes the key to that caller, so two callers who send one
// _meta.idempotencyKey never share a result upstream. [Transport] sets the
// headers on every upstream request whose context carries a [Meta]
// ([NewContext]); its documentation relates this to the MCP authorization
// specification's rule against token passthrough.
//
// # Errors
//
// The wrapper's own JSON-RPC errors use the codes [CodeKeyReused],
// [CodeInFlight], [CodeUnreplayable], [CodeUnavailable],
// [CodeInvalidParams] and [CodeInvalidRequest], each with data.reason. The
// last refuses a call whose numeric id is not an integer within int64:
// servers that hold ids as int64 (go-sdk among them) would answer it under
// another id, which neither the client nor the wrapper could match. A store that cannot be
// reached means the call is not run: it never runs without a claim.
package mcphttp
