// Package idem makes retried requests run their side effect at most once,
// durably.
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
// This root package is the domain: [Key] and its constructors, [Claim]
// outcomes, [Token]s, [Result]s, typed errors, the [Store] port, and
// [Table], the pure transition table every store implements. Table has no
// lock, no I/O and no clock (callers pass the time), so it can be tested as a
// state machine and used as the model the stores are checked against.
//
// Adapters depend on this package, never the reverse:
//
//   - memstore: the table behind a lock; the embedded default.
//   - pgstore: PostgreSQL on pgx/v5, the durable store.
//   - middleware: the Idempotency-Key semantics for net/http.
//   - mcphttp: deduplication of MCP tools/call on the Streamable HTTP transport.
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
