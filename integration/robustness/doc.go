// Package robustness searches for counterexamples to idem's promise. It
// runs three instances of a service built on idem (robustness/sut: both
// adapters; an effect outside the database, one committed with the answer,
// and the one-commit path, InTransaction, behind handlers that misbehave as
// net/http tolerates) on one PostgreSQL, drives them with retrying clients
// over a small key space, injects faults chosen by a seed, records every
// client's history and every instance's store calls and events, and checks
// them:
//
//   - porcupine (github.com/anishathalye/porcupine), per key, against a
//     model of the promise: a key is absent or done(answer), and every
//     answer a client gets for it is that one answer, except the answers
//     the documentation names as possibly lost (a completion that failed, a
//     process killed before it recorded, an owner fenced after its lease
//     ran out);
//   - the effect logs: an effect outside the database runs at most once per
//     key, unless the execution before it ended in one of those documented
//     windows (or the one after it is an owner fenced after its lease ran
//     out: its lease lost and its generation older, whatever became of its
//     completion), with a fault to explain it; the effect in the database exactly
//     once per answered key, and it is the answer;
//   - no client is told it succeeded (a 2xx) unless the answer names an
//     execution whose row is in the database;
//   - the claims: no two live at once, no stale generation ever renewed or
//     completed;
//   - nothing left behind: once the faults stop and the sweepers ran, no
//     key is claimed.
//
// The faults are network faults between each instance and PostgreSQL
// (toxiproxy as a library: latency, a black hole, connections reset, a data
// limit), SIGKILL and restart of an instance, SIGSTOP and SIGCONT for longer
// than the lease, SIGTERM with a shutdown bound shorter than the work, a
// PostgreSQL crash and restart, and, from the clients, hang-ups in the
// middle of a request or of its body, retries to another instance, and the
// same key with another body. The details are beside the code: the system
// on cluster, the clients in client_test.go, the fault schedule on the
// fault kinds, the checks and the documented windows on check.
//
// It runs with `make robustness` (SEED, DURATION, FAULTS); every run prints
// its seed and fault schedule. On a violation it writes porcupine's HTML
// visualization of the key (faults and instance events as annotations),
// the key's whole event sequence (the clients' attempts, every store call
// and idem.Event, each execution's phases, the effects, the faults,
// PostgreSQL's lock waits and long transactions) and the fault log to
// testdata/artifacts/seed-<seed>/, and prints where. The tests that do not
// need ROBUSTNESS_DURATION check the checker itself on histories built by
// hand. docs/reliability.md has the figures.
package robustness
