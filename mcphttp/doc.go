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
// # What is touched
//
// Only a POST whose body is a single JSON-RPC request, with an id, for a
// deduplicated method ([Options.Methods], by default tools/call). The
// wrapper reads the body to decide (at most [Options.MaxBodyBytes]) and
// gives the inner handler the body intact. Everything else passes straight
// through, unbuffered: initialize, notifications, the client's responses to
// server requests (sampling and elicitation replies reuse the id of the call
// still in flight, and must reach the server untouched), GET streams,
// DELETE, bodies that are not JSON (the inner handler owns the JSON-RPC
// error), longer bodies, and batches: a batch is not deduplicated, since
// its calls share one HTTP response and protocol revisions from 2025-06-18
// on do not allow batches at all. From protocol 2026-07-28 on, whose POSTs
// name their method in the Mcp-Method header, a request whose header names
// another method passes through without its body being read at all.
//
// The wrapper reads a body as go-sdk's server reads it: member names
// exactly, after unescaping ("PARAMS" is not "params"), so what it keys and
// fingerprints is what the server runs. A call whose envelope, params or
// _meta repeat a member name, which one reader resolves one way and another
// another, is refused ([CodeInvalidRequest], [ReasonDuplicateMember], HTTP
// 400) and not run.
//
// # Keys
//
// Every key lives in a scope: who is calling, plus the call's
// _meta.sessionId when it carries one (see "_meta upstream" below), as a keyed hash
// (HMAC-SHA-256 with [Options.ScopeSecret]; SHA-256 without one). Who is
// calling is the principal [Options.Principal] returns, else the
// credentials: the Authorization and X-Api-Key headers and the cookies
// named in [Options.SessionCookies]. A call that carries cookies but none of
// these, to a server that has not named its session cookies, is refused
// ([CodeInternalError], [ReasonUnscopedCookies]): the cookie may be the
// credential, and ignoring it would give one caller another's result.
// Callers without credentials share one identity, so between them a
// _meta.idempotencyKey is only as private as its value: one derived with
// [agentkey.Derive] from a secret session id is unguessable, "retry-1" is not.
//
// A call's key comes from where clients put it:
//
//   - params._meta.idempotencyKey ([SourceMeta]), where agents put it
//     (see [agentkey.Derive]) and what go-sdk tool handlers read back with
//     [FromCallToolRequest];
//   - params.idempotencyKey ([SourceParams]), the shape of the closed
//     [SEP-3182] proposal;
//   - the Idempotency-Key header of the HTTP POST ([SourceHeader]), an
//     RFC 8941 string or a bare token, read as package middleware reads it;
//   - the Mcp-Param-Idempotency-Key header ([SourceParamHeader]), the
//     header carrier of MCP 2026-07-28: a tool whose input schema mirrors
//     its idempotencyKey argument into a header ("x-mcp-header":
//     "Idempotency-Key") gets the key there from every conforming client
//     (go-sdk's sends it once it has listed the tools), plain or
//     "=?base64?…?=" as the spec encodes such headers. It must agree with
//     the argument it mirrors as well as with the other sources.
//
// No source outranks another: a call may carry its key in several, but
// two that name different keys are answered with [CodeInvalidParams]
// (data.reason "conflicting_idempotency_keys", the message naming both)
// and not run, since the wrapper cannot know which one the client meant.
// A key is validated with [idem.ParseClientKey] (an invalid one is
// [CodeInvalidParams], "invalid_idempotency_key", naming its source). Its
// fingerprint is the tool name and the canonical arguments
// ([agentkey.CanonicalJSON]), so the same key with another tool or other
// arguments is answered with [CodeKeyReused] and not run. Because the
// transport's Mcp-Session-Id plays no part, a client that re-initializes
// after a server restart (its MCP session is gone) and retries with the same
// key still gets the replay. The tool receives the key to forward upstream,
// bound to the caller, through [DerivedKeyHeader] (see "_meta upstream").
//
// A key only protects a retry that repeats it. A client built on a model
// may make a key up afresh on every attempt, which defeats it: each retry
// is a new call and runs. [Options.NewKeyGuard] notices that (the same
// caller, tool and canonical arguments under another client-chosen key
// within a window), reports it ([idem.EventKeyRotated]) and, as configured,
// runs it anyway, refuses it, or answers it as a retry of the first key. It
// is off by default: a caller who means two identical calls looks the same.
//
// A call without a key, before protocol 2026-07-28, is keyed by the
// method-call key, [idem.KeyForMethodCall], from the Mcp-Session-Id, the
// request id, the method and a target made of the tool name and a digest
// of the arguments (an id longer than 64 bytes, or a tool name longer than
// 128, by its SHA-256, so that the key stays within [idem.MaxKeyLen]). The digest is in the key, not only in the fingerprint:
// JSON-RPC lets a client reuse an id once it was answered, and a different
// tool or other arguments under a reused id must run as a fresh call, never
// be answered with another call's result. With the digest only in the
// fingerprint, the store would report a mismatch instead. A call without
// Mcp-Session-Id and without a key is not deduplicated: request ids are
// only unique per session, and two clients' id 1 must not share a result.
// A stateful server refuses a session it did not issue before the wrapper
// answers anything (see "Order of checks"), so the session is the client's
// own; a stateless one (go-sdk's StreamableHTTPOptions.Stateless) ignores
// the header at every version, so set [Options.Stateless] in front of one:
// then no call is keyed by session.
//
// # Protocol 2026-07-28
//
// [SessionlessProtocol] has no sessions and no initialize, and a retry is a new
// request with a new JSON-RPC id. So a call made at it (by its
// MCP-Protocol-Version header or its _meta protocol version) is never keyed
// by Mcp-Session-Id (the server ignores the header, so any client could
// send another's) or by its id: without a key it passes through, untouched,
// and runs as often as it is sent. A modern POST whose Mcp-Method header is
// not a deduplicated method passes through without its body being read
// (the server refuses a body that disagrees with the header), and so does
// one without the Mcp-Method or Mcp-Name header the spec requires of it.
// One limit: Mcp-Param-* headers mirror tool arguments that the tool's
// schema names (x-mcp-header), which the wrapper does not know, so for a
// call it answers from the store (a replay) it cannot tell that they are
// missing or disagree with the body; the inner handler judges them for
// every call that runs. go-sdk serves
// this version on a server built with StreamableHTTPOptions{Stateless:
// true} (add PropagateRequestCancellation: true, see "Cancellation", and
// [ToolCancellation] to the server, see "Cut off"), and its client picks it
// by itself.
//
// # Multi round-trip calls
//
// From 2026-07-28 a tool that needs input (an elicitation, a sampling, the
// roots) answers resultType "input_required" with inputRequests and a
// requestState, and the client retries the original call with
// inputResponses and the requestState echoed, under a new id, with the
// same key (go-sdk's client copies the call's params, _meta included).
// input_required is not the call's final answer, and round 2 is not a key
// reuse: each round is its own claim, keyed by the call's key and a digest
// of the round's requestState and inputResponses ([idem.ParseClientRoundKey]);
// neither is part of the fingerprint.
//
//	client                          mcphttp                        tool
//	tools/call id 1, key K   ──▶ claim (K, round ∅) ──────────────▶ runs
//	                         ◀── input_required, state S ◀────────
//	                              record (K, ∅) = input_required
//	(answer lost; resend)
//	tools/call id 2, key K   ──▶ (K, ∅) completed: replay input_required
//	tools/call id 3, key K,
//	  state S, responses R   ──▶ claim (K, digest(S, R)) ─────────▶ runs once
//	                         ◀── result ◀──────────────────────────
//	                              record (K, digest(S, R)) = result
//	(answer lost; resend)
//	tools/call id 4, key K,
//	  state S, responses R   ──▶ (K, digest(S, R)) completed: replay result
//
// A lost round-N answer retried replays round N; round N+1 runs once; the
// final round's result is what a retry of that round gets. A client that
// starts the whole call over with the same key replays every round. (Only
// if it sends the same input again: a round whose inputResponses differ is
// another round, and runs, since its answer may well differ too; a user who
// declined and then accepts must not be told "declined".)
// Before 2026-07-28 a server asks for input inside the one call (go-sdk
// sends an elicitation request on the call's stream and waits), and the
// call is one claim.
//
// # Cancellation
//
// Protocol 2026-07-28 says a closed response stream is the client's
// cancellation of the call. For a keyed call the wrapper, by default,
// finishes the tool and records its result anyway ("finish and record"):
// the client that dropped its connection is, far more often than not, one
// that lost it and will retry with the same key, and for a tool that is
// not idempotent (a payment, an invoice, a message) cancelling halfway
// leaves the side effect in an unknown state that the retry would repeat.
// Finishing it and replaying its result to the retry gives the caller what
// cancellation is for (no second effect, no work it did not ask for twice)
// and what the spec's rule protects: the server sends nothing more to the
// closed stream. Options.Engine.CancelWithClient instead propagates the
// cancellation to the tool (go-sdk: also set
// StreamableHTTPOptions.PropagateRequestCancellation) and releases the
// key, so the retry runs the tool again; choose it only for tools that
// stop cleanly, leaving no partial effect, or whose effect is itself
// idempotent. A call so cut off is recorded if the wrapper saw its whole
// response and that response is one it records (a tool result, which the
// tool finished with despite the cancellation: its side effect happened);
// otherwise (a JSON-RPC error, a tool error with isError, which is what
// go-sdk makes of a tool that returns its cancelled context's error, or no
// response) its key is released: see "Client hang-ups" in package
// [engine]. Calls without a key are not the wrapper's: they run, and are
// cancelled, exactly as the inner server runs them.
//
// So, per case, at 2026-07-28: a call with a client-chosen key (the client
// said it will retry) runs on when its stream closes and is recorded; a
// call without one is not deduplicated, and a closed stream cancels it
// (with go-sdk's PropagateRequestCancellation, which the wrapper
// recommends for its stateless handler). Before 2026-07-28 a dropped stream
// is not cancellation (those revisions say so, and cancel with
// notifications/cancelled, which passes through to the server): every
// deduplicated call, a derived key's too, runs on and is recorded.
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
// call's response (the server closed the stream for the client to resume it
// with a GET, [SEP-1699]), or an answer without a single byte, leaves the
// claim to its lease: the tool may still be running, and the response,
// delivered on a resumed stream, is one the wrapper never sees. Until the
// lease runs out a retry waits or gets [CodeInFlight]; after it, the retry
// runs again.
//
// # Closed sessions
//
// A client whose connection dropped mid-call often closes its session (an
// HTTP DELETE with the Mcp-Session-Id, which SDKs send when a client
// closes) and retries the call from a new session. go-sdk lets the tool of
// a call on a closed session finish but drops its result with the session,
// ending the call's POST without a byte. So the wrapper holds a session's
// DELETE until the deduplicated calls it runs on that session have
// answered, for at most Options.Engine.Wait (not at all with a negative Wait),
// and then passes it on: their answers are recorded, and the retry from the
// new session gets the replay. A call still running when the wait ends, or
// on a session closed another way (the server's idle timeout, a restart),
// loses its answer; the wrapper sees nothing and leaves the claim to its
// lease, since the tool may have run.
//
// The inner handler runs on a context that survives the client: go-sdk
// ends a call's stream when the HTTP request's context ends, and the
// client that dropped its connection is exactly the one that will retry.
// With the context detached, the inner handler keeps writing the call's
// response (the wrapper stops sending it to the gone client) and the
// wrapper records it for the retry. The claim, its renewal, the deadline
// that ends the call's work (cause [idem.ErrLeaseLost]) before the lease
// could run out unrenewed, the call's deadline (Options.Engine.MaxExecution, or
// the request's own), Options.Engine.Shutdown, which endings are recorded and
// the retry delays are the shared behaviour of idem's adapters, built once
// in package [engine] and documented there.
//
// # Cut off
//
// When the engine cuts a call off (its lease was lost, its deadline
// passed, Options.Engine.Shutdown), the tool is told to stop, and what it still
// answers is the call's answer: a tool that had done its effect and
// answers a result has it recorded (fenced by the claim's generation), and
// the retry replays it instead of running the tool again; one that stops
// and answers an error (a JSON-RPC error, or isError, which is what go-sdk
// makes of a tool that returns its context's error) has its key released.
// For that the answer must reach the wrapper, and go-sdk drops the answer
// of a call whose HTTP request context ended: it ends the call's stream
// with the context. So the cut-off does not end the inner request's
// context; the tool is told its own way:
//
//   - Before 2026-07-28, on a stateful server, go-sdk runs a session's
//     tools on the session's context, and the wrapper sends the inner
//     handler a notifications/cancelled for the call's id on the same
//     session, as a client would, which cancels the tool.
//   - At 2026-07-28, and on a stateless server ([Options.Stateless]), a
//     call's request is its own session (a notice would land in a fresh
//     one), and go-sdk ties the tool's context to the request's alone. Add
//     [ToolCancellation] to the server (mcp.Server.AddReceivingMiddleware):
//     through it the wrapper ends the tool's context at the cut-off, while
//     the request stays to carry the answer.
//   - Another MCP server runs the call's tool on [WorkContext] of its
//     request's context, which ends at the cut-off.
//
// A call that has not answered a lease (Options.Engine.Lease) after its cut-off
// has its inner request's context ended too: go-sdk then ends the call's
// stream, and a stateless server with
// StreamableHTTPOptions.PropagateRequestCancellation but without
// ToolCancellation cancels the tool, late, which is the only way to stop
// one there, at the cost of the answer of a tool that still gives one. Not
// when ToolCancellation took the call: its tool was told at the cut-off,
// and go-sdk's stateless handler returns when its tool does. A call whose
// inner handler returned without its response after a cut-off (so ended,
// or its session closed) leaves its claim to its lease, since the tool may
// have run, and its client gets the wrapper's own answer rather than
// silence: [CodeInFlight] with data.reason [ReasonCutOff] ("cut_off"),
// data.type [TypeInProgress] and data.retryAfterMs, framed as the inner
// handler framed its answer; a retry with the same key gets the call's
// result or, once the claim ran out, runs it. A tool that never ends keeps
// its request's goroutine, as it keeps go-sdk's own; a session that closes
// ends both.
//
// A replay is the recorded response with its id rewritten to the retry's id
// and its result marked: "io.github.idemkit/replayed": true in the result's
// _meta ([ReplayedMetaKey]), every other member as recorded. It is framed as
// the inner handler frames its answers: an SSE "message" event or a JSON
// body, with the Idempotent-Replayed: true header. The marker is what an
// application sees: MCP SDK clients return the result's members (content,
// structuredContent, _meta), not the HTTP headers. A first run's result has
// no marker.
//
// A duplicate of a call still in flight waits up to Options.Engine.Wait
// ([idem.ClaimWait]) and gets the replay; past the wait it gets
// [CodeInFlight], whose message says to retry. If the original released its
// claim in the meantime, the duplicate runs the call itself. One whose
// request's context the server ends while it waits (a shutdown cancelling
// what still runs) gets [CodeUnavailable], to retry elsewhere.
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
// URL, headers, credentials, context) with the body replaced by a probe
// under the same id and _meta, and captures the answer. The probe is ping
// before 2026-07-28 and server/discover from it on (with Mcp-Method saying
// so): the one request every MCP server of that revision answers, with no
// effect. Only if the inner handler answers the probe with a JSON-RPC
// result does the wrapper answer the call, in the framing the probe showed;
// otherwise the client gets the probe's answer, the inner handler's own
// rejection, byte for byte, and the wrapper logs it and reports
// [idem.EventRejected]. The wrapper's own errors (a reused key, a call in
// flight, an unavailable store) never carry Idempotent-Replayed: only a
// recorded response does.
//
// # _meta upstream
//
// A tool that calls an upstream HTTP API forwards _meta.sessionId as
// X-Session-Id and the call's key as X-Idempotency-Key, so the upstream can
// dedupe too. In a go-sdk tool handler, [FromCallToolRequest] returns both
// (go-sdk runs tool handlers on the session's context, not the request's,
// so the wrapper cannot pass them in a context). The key forwarded is never
// the client's key as sent: it is the call's key (_meta.idempotencyKey,
// params.idempotencyKey, the header, or the key the wrapper derived) bound
// to the call's scope, the hex HMAC-SHA-256 of the key keyed by the scope,
// handed to the inner handler in [DerivedKeyHeader]. The upstream cannot be
// trusted to tell callers apart: a server on MCP's OAuth profile calls its
// APIs with its own token (no [Transport.Upstreams]), so every caller looks
// the same there, and a raw "pay-1" from Alice and from Bob would be one key
// upstream, Bob reading Alice's payment. Bound, two callers never share a
// result upstream, and one caller's retry forwards the same value, so the
// upstream dedupes it. A call the wrapper did not deduplicate forwards no key.
// The caller's Authorization and X-Api-Key travel with them, as MCP
// servers generated from a REST API's description forward them, but only to the upstream origins
// [Transport.Upstreams] names and never on a redirect to another origin.
// [Transport] sets the
// headers on every upstream request whose context carries a [Meta]
// ([NewContext]); its documentation relates this to the MCP authorization
// specification's rule against token passthrough.
//
// # Two halves
//
// The package has a server half and a client half, in separate files.
//
// The server half is the wrapper, which an MCP server mounts in front of its
// handler: options.go ([Options], defaults, validation), wrapper.go ([New],
// ServeHTTP: which calls it deduplicates), keys.go and scope.go (the key and its
// scope), newkey.go ([NewKeyGuard]), execute.go (a claimed call run through the inner handler and the
// engine), notice.go and toolcancel.go (telling a tool it was cut off:
// notifications/cancelled, [ToolCancellation]), sessions.go (a session's
// DELETE waits for its calls), advertise.go
// (the extension in initialize and server/discover), recorder.go and
// scanner.go (what is recorded from its answer: the shared capture core
// with the SSE and JSON scanner), probe.go, responsebuffer.go and reply.go
// (the answers the wrapper makes itself), jsonrpc.go, rpcerror.go,
// protocol.go and rounds.go (the protocol details). The header names, the
// options it shares with package middleware, the scoper and the capture
// core are in the module's internal/adapter package. It reads
// JSON-RPC from HTTP requests and wraps any Streamable HTTP handler,
// go-sdk's or another; only toolcancel.go imports go-sdk, for the
// middleware a go-sdk server adds.
//
// The client half is for a tool's calls to its upstream API: client.go
// ([Meta], [Meta.SetHeaders], [Meta.SetCredentials], [FromCallToolRequest],
// [NewContext], [FromContext]) and transport.go ([Transport]). client.go
// imports go-sdk for [FromCallToolRequest], which reads _meta and
// [DerivedKeyHeader] from go-sdk's mcp.CallToolRequest in a tool handler. The wrapper uses the client half
// only to hand the tool its [Meta] ([NewContext], [DerivedKeyHeader]).
//
// # Discovery
//
// A client can learn that the server dedupes calls, and decide to send
// keys, from the answer the server gives when it is discovered: the wrapper
// adds the extension [ExtensionID] ("io.github.idemkit/idempotency") to
// capabilities.extensions of a server/discover result (2026-07-28) and to
// capabilities.experimental of an initialize result (earlier revisions).
// Its settings name the deduplicated methods, the key sources, the
// retention the store reports (retentionSeconds), and the replay marker
// (replayedMeta, [ReplayedMetaKey]). The answer is otherwise the inner
// handler's, held until it is complete (it is one message) and at most
// [Options.MaxRecordBytes]: a longer one passes unchanged.
//
// # Errors
//
// The wrapper's own JSON-RPC errors use the codes [CodeKeyReused] (-31090),
// [CodeInFlight] (-31091), [CodeUnreplayable] (-31092), [CodeUnavailable]
// (-31093), [CodeInvalidParams] and [CodeInvalidRequest], each with
// data.reason. Its own codes are outside the range JSON-RPC reserves
// (-32768 to -32000), in which MCP 2026-07-28 allows only codes its
// specification defines. The errors of a call still in flight (or cut off
// before it answered, see "Cut off") and of a key reused for another call
// carry data.type, [TypeInProgress]
// ("idempotency_key_in_progress") and [TypeConflict]
// ("idempotency_key_conflict"), the names the closed SEP-3182 proposal gave
// them. The
// last refuses a call whose numeric id is not an integer within ±(2^53-1):
// servers that hold ids as floats (go-sdk among them) would answer it under
// another id, which neither the client nor the wrapper could match. A store that cannot be
// reached means the call is not run: it never runs without a claim.
//
// [SEP-1699]: https://github.com/modelcontextprotocol/modelcontextprotocol/issues/1699
// [SEP-3182]: https://github.com/modelcontextprotocol/modelcontextprotocol/issues/3182
package mcphttp
