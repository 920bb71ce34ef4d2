// Package idem makes retried requests run their side effect at most once,
// durably.
//
// # Where to start
//
// Import the package for what you are building:
//
//   - [github.com/idemkit/idem/middleware]: an Idempotency-Key middleware for
//     net/http (func(http.Handler) http.Handler); start here for a REST API.
//   - [github.com/idemkit/idem/mcphttp]: deduplication of MCP tools/call on
//     the Streamable HTTP transport, and helpers for a tool to forward the
//     call's keys.
//   - [github.com/idemkit/idem/agentkey]: the key an agent derives for an MCP
//     call's _meta.idempotencyKey, the canonical JSON it hashes, published
//     test vectors.
//   - [github.com/idemkit/idem/pgstore]: the durable store, on PostgreSQL
//     (pgx/v5), for production.
//   - [github.com/idemkit/idem/migrations]: creates and upgrades pgstore's
//     table (goose); run it before pgstore.New, or with the idem CLI.
//   - [github.com/idemkit/idem/memstore]: the in-memory store, for tests,
//     single-process services and development.
//   - [Sweeper]: releases abandoned claims and deletes expired results;
//     pgstore runs one from New to Close; with memstore, run one yourself.
//   - [github.com/idemkit/idem/engine]: claim, run under a renewed lease,
//     record or release; both adapters use it, as can one for another
//     transport.
//   - [github.com/idemkit/idem/idemotel], [github.com/idemkit/idem/idemprom]:
//     OpenTelemetry and Prometheus (client_golang) for the adapters' events
//     and the sweeper.
//   - [github.com/idemkit/idem/idemtest]: the contract suite a new [Store]
//     must pass.
//
// # How it works
//
// A client whose connection dropped cannot tell "never ran" from "ran, and
// the answer was lost", so it retries. idem claims the key atomically
// (claiming and checking are one operation), executes only if the claim is
// yours, and records the result for every later retry to replay
// ([design.md] is the whole account).
//
// This root package is what the others share, the domain: [Key] and its
// injective constructors, [Claim] outcomes, [Token], [Result], typed
// errors, the [Store] and [TxStore] ports, each [Event] adapters report, and
// [StateMachine], the pure transition table every store is checked against.
// It imports none of the packages above and starts no goroutine
// ([Sweeper.Run] and [ClaimWait] block in the caller's).
//
// Every claim carries a generation, never issued twice for a (scope, key).
// Its [Token] holds it and fences the claim: completing, renewing or
// releasing with a superseded generation fails with [*StaleClaimError] and
// changes nothing, so a slow owner whose lease ran out cannot overwrite its
// successor's result.
//
// [design.md]: https://github.com/idemkit/idem/blob/main/docs/design.md
package idem
