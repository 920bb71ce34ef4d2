// Package robustness searches for counterexamples to idem's promise: it
// runs several instances of a service built on idem (robustness/sut: both
// adapters, an effect outside the database and one committed with the
// answer, and the one-commit path, InTransaction, behind handlers that
// misbehave as net/http tolerates: a status written twice, a status after
// the body, a panic after answering, work past MaxExecution, a
// transaction left idle past its bound, an answer over the record limit)
// on one PostgreSQL, drives them with retrying clients over a small
// key space, injects faults chosen by a seed, records every client's
// history and every instance's store calls and events, and checks them:
//
//   - porcupine (github.com/anishathalye/porcupine), per key, against a
//     model of the promise: a key is absent or done(answer), and every
//     answer a client gets for it is that one answer, except the answers
//     the documentation names as possibly lost (a completion that failed, a
//     process killed before it recorded, an owner fenced after its lease
//     ran out);
//   - the effect logs: an effect outside the database runs at most once
//     per key, unless the execution before it ended in one of those
//     documented windows (or the one after it is an owner fenced after its
//     lease ran out), with a fault to explain it; the effect in the
//     database exactly once per answered key, and it is the answer;
//   - the clients' side of the effect in the database: no client is ever
//     told it succeeded (a 2xx) unless the answer names an execution
//     whose row is in the database;
//   - the claims: no two live at once, no stale generation ever renewed or
//     completed;
//   - nothing left behind: once the faults stop and the sweepers ran, no
//     key is claimed.
//
// The faults are network faults between each instance and PostgreSQL
// (toxiproxy as a library: latency, a black hole, connections reset, a data
// limit), SIGKILL and restart of an instance, SIGSTOP and SIGCONT for longer
// than the lease, SIGTERM with a shutdown bound shorter than the work, a
// PostgreSQL crash (stop -m immediate) and restart, and, from the clients,
// hang-ups in the middle of a request or of its body, retries to another
// instance, and the same key with another body.
//
// It runs with `make robustness` (SEED, DURATION, FAULTS); every run prints
// its seed and fault schedule, and on a violation writes porcupine's
// visualization and the offending keys' whole event sequences to an
// artifacts directory. The tests in this package that do not need
// ROBUSTNESS_DURATION check the checker itself on histories built by hand.
// docs/reliability.md has the figures.
//
// # The system
//
// Three instances of robustness/sut on one private PostgreSQL (local server
// binaries, else a container), each reaching it through its own toxiproxy
// proxy (github.com/Shopify/toxiproxy/v2 v2.12.0, a library in the test).
// Its handlers: POST /ext calls the harness's effect service (numbered as it
// arrives), works up to 1.5 s ignoring its context and answers 201 naming
// its execution; POST /db inserts a row into robust_effects and records its
// answer in the same transaction (middleware.Commit with
// pgstore.Store.CompleteTx); tools/call ext over MCP (go-sdk, stateless, JSON
// responses, mcphttp.ToolCancellation) behind mcphttp, keyed by
// _meta.idempotencyKey, with the /ext effect; POST /tx, the one-commit path
// (InTransaction, MaxExecution 500 ms, MaxRecordBytes 4 KiB), inserts its
// row in the claim's transaction, works up to 300 ms ignoring its context,
// and misbehaves as its key says, as net/http tolerates: status, body, then
// http.Error; the body before WriteHeader(201); a panic after the answer;
// work past MaxExecution; the transaction idle past its bound (body before
// status); an answer over the record limit (committed early, unreplayable,
// retries answered 410); or none. Panics and idle transactions come on odd
// row ids, so a retry gets through. Lease 1 s, wait 500 ms, store timeout
// 1 s, a sweeper every 500 ms per instance, a shutdown bound of 300 ms.
//
// # The clients
//
// 12 workers over 6 active keys (a key takes 2–6 logical requests, then a
// new one replaces it), retrying after errors, time-outs (4 s), 409 (after
// Retry-After) and 503, with jitter, up to 8 tries or 15 s; two retries in
// three go to another instance. 6% of attempts hang up at a random moment,
// 3% send part of the body and close; once a key was replayed, clients send
// it with another body (a probe: it must get 422 and never run).
//
// # The faults
//
// Drawn from the seed (FAULTS=all, a list, or rotate: four kinds, at least
// one network and one process fault), one at a time per target, every 1–3 s:
//
//	latency   toxiproxy latency, both directions, 100–1000 ms        1–4 s
//	          (jitter a quarter)
//	timeout   toxiproxy timeout 0: a black hole, connections held    1.5–4 leases
//	reset     toxiproxy reset_peer on data                           0.5–2 s
//	limit     toxiproxy limit_data 200–5000 bytes per connection     1–3 s
//	kill      SIGKILL, restart on the same address                   down 0.2–2 s
//	pause     SIGSTOP, then SIGCONT (twice as likely as the others)  1.5–3 leases
//	term      SIGTERM: the 300 ms shutdown bound cuts the work off   down 0.2–1 s
//	          (engine.ErrShutdown), restart
//	pg-crash  pg_ctl stop -m immediate, then start                   down 0.5–3 s
//	stall     not injected: the machine stopped (a VM snapshot,      the gap
//	          memory reclaim), seen as a gap of 500 ms or more in a
//	          10 ms ticker; explains what a pause of every instance
//	          and PostgreSQL at once explains
//
// # The checks
//
// porcupine (v1.3.1) per key against the model: a key is absent or
// done(the execution it records); an attempt without an answer (time-out,
// hang-up, 409, 503) changes nothing, unless it started an execution that
// may have been recorded, whose answer may then appear any time after it
// began; a fresh answer records; a replay must be the recorded answer; 422
// only for the other body. Then the effect logs; the claims, from every
// store call's sending and return (a generation acquired before the
// previous one's last confirmed lease ran out, or a stale generation's
// renewal or completion that succeeded, is a violation); the rows of
// robust_effects against the answers and records; every 2xx a client of
// /db or /tx got, which must name an execution whose row is in the
// database; idem_keys once the faults stopped, every key answered and the
// sweepers ran; the instances' stderr for panics and races.
//
// The documented windows in which an effect outside the database may run
// again, each counted and required to coincide with a fault on that
// instance or on PostgreSQL: the earlier execution's process was killed
// between the effect and the record (middleware's package doc: Commit
// closes the window); its completion failed (docs/design.md, "What is
// recorded": a complete that still fails leaves the claim to its lease); its
// owner lost the lease and was fenced (docs/design.md, "Fencing is by
// generation"); the later execution is such an owner, paused or stalled
// past its lease while a successor recorded, whose work did not honour its
// context (package engine: work must honour its context); its context ended
// (Shutdown, a lost lease) without a success and it was released
// (docs/design.md, "What is recorded"); an MCP call's inner handler
// returned no response after a cut-off, left to its lease
// (docs/design.md, "MCP calls cut off"). In the first three the client may
// hold the earlier, unrecorded answer; the model allows it.
//
// On a violation a run writes porcupine's HTML visualization of the key
// (faults and instance events as annotations), the key's whole event
// sequence (the clients' attempts, every store call and idem.Event, each
// execution's phases, the effects, the faults, PostgreSQL's lock waits and
// long transactions) and the fault log to
// testdata/artifacts/seed-<seed>/, and prints where.
package robustness
