// Package pgstore is the PostgreSQL [idem.Store]: durable claims that
// survive crashes and restarts of any number of service instances, on
// pgx/v5 and one table created by package migrations.
//
// # Use
//
//	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil { ... }
//	store, err := pgstore.New(pool, pgstore.Options{})
//	if err != nil { ... }
//	defer store.Close() // stops the store's sweeper (Options.SweepInterval)
//
// One row per present (scope, key); every time is the database's, so
// instances with skewed clocks agree. The database must be UTF8 (else
// migrations.Up and the first Claim return a *migrations.EncodingError).
// Each statement is a file in pgstore/sql bound to typed parameters and
// rows in queries.go ([design.md, "pgstore's statements"]).
//
// # Claim
//
// Claim is one statement for a new key, a replay or a duplicate in flight,
// and a second to take over a row whose lease or retention ran out.
// Complete, Renew and Release are one statement each, fenced by the
// generation, and allowed after the lease ran out while nobody took the key
// over ([design.md, "pgstore's statements"]).
//
// # Exactly once in the same database
//
// [Store.BeginClaim] (the [idem.TxStore] behind InTransaction) claims the
// key inside a transaction the work writes in through [TxFrom] (a pgx.Tx)
// or [SQLTxFrom] (the same transaction as a *sql.Tx, for database/sql and
// the layers on it: sqlc, GORM, sqlx, bun);
// [idem.TxClaim].Commit records the result and commits. The claim is a
// transaction-scoped advisory lock on the key's hash, and the key's row is
// written once, with its result, just before the COMMIT. A rollback leaves
// nothing; a duplicate waits in PostgreSQL, on the lock, up to
// TxLimits.Wait; a two-phase Claim takes the lock shared, so the two never
// hold a key at once; an
// [*idem.TxLimitError] names a server bound that ended the transaction
// ([design.md, "Two ways to claim"]).
//
//	c, tx, err := store.BeginClaim(ctx, req, idem.TxLimits{Wait: 5 * time.Second})
//	// c.Status == idem.Acquired: tx is open
//	_, err = pgstore.TxFrom(tx.Context(ctx)).Exec(ctx, `INSERT INTO invoices …`)
//	err = tx.Commit(ctx, result) // or tx.Rollback(ctx): nothing is left
//
// A handler with its own transaction claims first, then records with
// [Store.CompleteTx] in the transaction that writes its rows: both commit,
// or neither. A stale token raises SQLSTATE IDM01, aborting the
// transaction. Limits: only that transaction's writes are covered; a crash
// before the commit holds the key until its lease runs out; never call it
// in a savepoint the caller may roll back to (that discards the error);
// under REPEATABLE READ or SERIALIZABLE a takeover or a waiter's mark after
// the snapshot fails it with a serialization error (a rollback, safe).
//
// # Waiting and the replay cache
//
// Wait blocks on one LISTEN connection per Store, polling as the fallback
// ([design.md, "Waiting"]). With Options.ReplayCacheBytes, results are
// replayed from memory until their retention or a [Store.Forget] on any
// instance. The cache does not see rows changed by hand in SQL, nor, for up
// to twice Options.Heartbeat, a LISTEN connection that silently stopped
// delivering: forget keys with [Store.Forget] or the CLI, never DELETE.
//
// # Sweeping
//
// [Store.Sweep] deletes abandoned claims, then expired results, up to limit
// rows, FOR UPDATE SKIP LOCKED: sweepers never wait for each other.
// The store sweeps on a jittered interval from [New] until [Store.Close]
// (Options.SweepInterval; negative: none, for a service that sweeps elsewhere).
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
