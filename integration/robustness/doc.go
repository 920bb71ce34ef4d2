// Package robustness searches for counterexamples to idem's promise. It runs
// three instances of a service on idem (robustness/sut: both adapters; an
// effect outside the database, one committed with the answer, and the
// one-commit path, InTransaction, behind handlers that misbehave as net/http
// tolerates) on one PostgreSQL, drives them with retrying clients over a
// small key space, injects faults chosen by a seed, records every client's
// history and every instance's store calls and events, and checks them:
//
//   - porcupine (github.com/anishathalye/porcupine), per key, against a model
//     of the promise: a key is absent or done(answer), and every answer a
//     client gets for it is that answer, except those the documentation names
//     as possibly lost (a failed completion, a process killed before it
//     recorded, an owner fenced after its lease ran out);
//   - the effect logs: an effect outside the database runs at most once per
//     key, unless the execution before it ended in one of those windows (or
//     the one after it is such a fenced owner: lease lost, generation older,
//     whatever became of its completion), with a fault to explain it; the
//     effect in the database runs exactly once per answered key, and is the
//     answer;
//   - no client gets a 2xx unless the answer names an execution whose row is
//     in the database;
//   - the claims: never two live at once, no stale generation renewed or
//     completed;
//   - nothing left behind: once the faults stop and the sweepers ran, no key
//     is claimed.
//
// The faults: network faults between each instance and PostgreSQL
// (toxiproxy as a library: latency, a black hole, connections reset, a data
// limit), SIGKILL and restart of an instance, SIGSTOP and SIGCONT for longer
// than the lease, SIGTERM with a shutdown bound shorter than the work, a
// PostgreSQL crash and restart, and, from the clients, hang-ups mid-request
// or mid-body, retries to another instance, and the same key with another
// body. Details are beside the code: the system on cluster, the clients in
// client_test.go, the fault schedule on the fault kinds, the checks and the
// documented windows on check.
//
// `make robustness` (SEED, DURATION, FAULTS) runs it and prints the seed and
// fault schedule. A violation writes porcupine's HTML visualization of the
// key (faults and instance events as annotations), the key's whole event
// sequence (the clients' attempts, every store call and idem.Event, each
// execution's phases, the effects, the faults, PostgreSQL's lock waits and
// long transactions) and the fault log to testdata/artifacts/seed-<seed>/,
// and prints where. Tests that do not need ROBUSTNESS_DURATION check the
// checker on hand-built histories. Figures: docs/reliability.md.
package robustness
