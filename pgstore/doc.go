// Package pgstore is the PostgreSQL [idem.Store]: durable claims that
// survive crashes and restarts of any number of service instances, on
// pgx/v5 and one table created by package migrations.
//
// # Use
//
//	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil { ... }
//	store, err := pgstore.New(pool, pgstore.Options{})
//	if err != nil { ... }
//	defer store.Close()
//	go store.Run(ctx, time.Minute) // the sweeper, in every instance
//
// One row per present (scope, key) holds its state, generation (from one
// sequence per table, so never issued twice), fingerprint, owner, lease
// end or result, and times; every time is the database's
// (statement_timestamp()), so instances with skewed clocks agree. The
// database must be UTF8: migrations.Up and the first Claim refuse any other
// (a *migrations.EncodingError, matching migrations.ErrEncoding). Each
// statement is a file in pgstore/sql named for its operation and bound to
// typed parameters and rows in queries.go; see [design.md, "pgstore's
// statements"] for the table, the statements, and why the bindings are not
// generated.
//
// # Claim
//
// Claim is one statement for a new key, a replay or a duplicate in flight
// (an insert that does nothing when the key has a row, and returns that
// row), and a second, conditioned on the generation it saw, to take over a
// row whose lease or retention ran out. Complete, Renew and Release are one
// statement each, fenced by the generation; Renew and Complete are allowed
// after the lease ran out as long as nobody took the key over. Races,
// waits for a key held in a transaction, and strict isolation levels are
// in [design.md, "pgstore's statements"].
//
// # Exactly once in the same database
//
// [Store.BeginClaim] (the [idem.TxStore] behind the adapters'
// InTransaction) claims the key inside a transaction the work writes in
// through [TxFrom]; [idem.TxClaim].Commit records the result and commits,
// all in the business transaction's own round trips. A crash or rollback
// leaves nothing; a duplicate waits in PostgreSQL, up to TxLimits.Wait;
// TxLimits.Idle and TxLimits.Execution bound the transaction on the server,
// and an [*idem.TxLimitError] says which ended it. See [design.md, "Two
// ways to claim"].
//
//	c, tx, err := store.BeginClaim(ctx, req, idem.TxLimits{Wait: 5 * time.Second})
//	// c.Status == idem.Acquired: tx is open
//	_, err = pgstore.TxFrom(tx.Context(ctx)).Exec(ctx, `INSERT INTO invoices …`)
//	err = tx.Commit(ctx, result) // or tx.Rollback(ctx): nothing is left
//
// A handler that manages its own transaction claims first, then records
// with [Store.CompleteTx] in the transaction that writes its rows: both
// commit, or neither does and the key stays claimed by the same token. A
// stale token raises SQLSTATE IDM01, which aborts the transaction, so a
// slow owner that was taken over loses its writes. Its limits: only writes
// in that transaction are covered; a crash between claim and commit holds
// the key until its lease runs out; never call it in a savepoint the caller
// may roll back to (that discards the error); under REPEATABLE READ or
// SERIALIZABLE a takeover, or a waiter that marked the row, after the
// snapshot fails it with a serialization error (a rollback, still safe).
//
// # Waiting and the replay cache
//
// Wait blocks on one LISTEN connection per Store (or Options.ListenConfig
// behind a transaction-mode pooler), with polling as the fallback and
// Options.NoListen for engines without LISTEN/NOTIFY; completions notify
// only keys someone waits on ([design.md, "Waiting"]). With
// Options.ReplayCacheBytes, completed results are also kept in process and
// replayed without a round trip ([Store.ClaimFromCache]) until their
// retention or a [Store.Forget] on any instance. The cache does not see rows
// deleted or changed by hand in SQL, nor, for up to twice
// Options.Heartbeat, a LISTEN connection that silently stopped delivering:
// forget keys with [Store.Forget] or the idem CLI, never with DELETE.
//
// # Sweeping
//
// [Store.Sweep] deletes abandoned claims, then expired results, at most
// limit rows in one statement, FOR UPDATE SKIP LOCKED, so sweepers in every
// instance never wait for each other; [Store.Run] sweeps on a jittered
// interval.
//
// # Errors
//
// Invalid keys and scopes are rejected before anything is sent. Every
// database failure, a cancelled context included, is an
// [*idem.UnavailableError] naming the operation and wrapping the cause.
//
// [design.md, "pgstore's statements"]: https://github.com/idemkit/idem/blob/main/docs/design.md#pgstores-statements
// [design.md, "Two ways to claim"]: https://github.com/idemkit/idem/blob/main/docs/design.md#two-ways-to-claim
// [design.md, "Waiting"]: https://github.com/idemkit/idem/blob/main/docs/design.md#waiting
package pgstore
