// Package idem makes retried requests run their side effect at most once,
// durably.
//
// # Where to start
//
// Import the package for what you are building; this root package is what
// they share.
//
//   - [github.com/idemkit/idem/middleware]: an Idempotency-Key middleware
//     for net/http (func(http.Handler) http.Handler). Start here for a REST
//     API.
//   - [github.com/idemkit/idem/mcphttp]: deduplication of MCP tools/call on
//     the Streamable HTTP transport, wrapping a go-sdk server's handler; and
//     the client-side helpers a tool uses to forward the call's keys.
//   - [github.com/idemkit/idem/agentkey]: the key an agent derives for an MCP
//     call's _meta.idempotencyKey, and the canonical JSON it hashes; for
//     clients, with published test vectors.
//   - [github.com/idemkit/idem/pgstore]: the durable store, on PostgreSQL
//     (pgx/v5). Production uses this one.
//   - [github.com/idemkit/idem/migrations]: creates and upgrades pgstore's
//     table (goose); run it before pgstore.New, or with the idem CLI.
//   - [github.com/idemkit/idem/memstore]: the in-memory store, for tests,
//     single-process services and development.
//   - [Sweeper]: releases abandoned claims and deletes expired results from
//     either store; run one per instance (the stores' Run is shorthand).
//   - [github.com/idemkit/idem/engine]: claim, run under a renewed lease,
//     record or release. Both adapters use it; import it to write an adapter
//     for another transport.
//   - [github.com/idemkit/idem/idemotel]: OpenTelemetry spans and metrics
//     for the adapters' events.
//   - [github.com/idemkit/idem/idemprom]: Prometheus metrics (client_golang)
//     for the adapters' events and the sweeper.
//   - [github.com/idemkit/idem/idemtest]: the contract suite a new [Store]
//     must pass.
//
// # How it works
//
// A client whose connection dropped cannot tell "the server never ran my
// request" from "the server ran it and the answer was lost", so it retries.
// idem makes that retry safe by putting a claim in front of the side effect:
//
//  1. claim the key, atomically, so exactly one caller owns it;
//  2. execute, only if the claim came back as yours;
//  3. record the result under the same key, so every later retry replays it.
//
// Claiming and checking are one operation on purpose: a check that does not
// also claim leaves a window in which a second retry reads the same absence
// and runs the side effect as well.
//
// # The pieces
//
// This root package is the domain and nothing else: [Key] and its
// constructors, [Claim] outcomes, [Token]s, [Result]s, typed errors, the
// [Store] and [TxStore] ports, the [Event]s adapters report, and [StateMachine], the
// pure transition table every store implements. StateMachine has no
// lock, no I/O and no clock (callers pass the time), so it can be tested as a
// state machine and used as the model the stores are checked against.
//
// The packages above depend on this one, never the reverse; the root
// imports nothing of theirs and starts no goroutine ([Sweeper.Run] and
// [ClaimWait] block in the caller's).
//
// # Generations
//
// Every claim carries a generation, a number never issued twice for the same
// (scope, key): not after a release, a sweep or a restart. A [Token] holds the
// generation it was issued under and is the fencing token of the claim:
// completing, renewing or releasing with a token whose generation is no
// longer current fails with a [*StaleClaimError] and changes nothing. That is
// what keeps a slow owner whose lease ran out from overwriting the result of
// the caller that took its key over.
//
// # Keys
//
// A [Key] is what is being asked within a scope. Keys are built by
// constructors whose encoding is injective: distinct inputs never give equal
// keys, whatever bytes a client-chosen id contains. See [Key] for the
// encoding.
package idem
