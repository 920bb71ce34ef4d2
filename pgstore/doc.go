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
// One row per present (scope, key), every time the database's, so instances
// with skewed clocks agree. The database must be UTF8 (else migrations.Up
// and the first Claim return a *migrations.EncodingError). Claim is one
// statement, a takeover two; Complete, Renew and Release one each, fenced by
// the generation; each a file in pgstore/sql ([design.md, "pgstore's
// statements"]).
//
// # Exactly once in the same database
//
// [Store.BeginClaim] (the [idem.TxStore] behind InTransaction) claims the key
// in a transaction the work writes in through [TxFrom] (a pgx.Tx) or
// [SQLTxFrom] (a *sql.Tx, for database/sql, sqlc, GORM, sqlx, bun);
// [idem.TxClaim].Commit records the result and commits. A duplicate waits in
// PostgreSQL up to TxLimits.Wait; an [*idem.TxLimitError] names a server
// bound that ended the transaction ([design.md, "Two ways to claim"]).
//
//	c, tx, err := store.BeginClaim(ctx, req, idem.TxLimits{Wait: 5 * time.Second})
//	// c.Status == idem.Acquired: tx is open
//	_, err = pgstore.TxFrom(tx.Context(ctx)).Exec(ctx, `INSERT INTO invoices …`)
//	err = tx.Commit(ctx, result) // or tx.Rollback(ctx): nothing is left
//
// A handler with its own transaction claims first, then records with
// [Store.CompleteTx] in the transaction that writes its rows: both commit, or
// neither. Never call it in a savepoint the caller may roll back to (its
// limits: [design.md, "pgstore's statements"]).
//
// # Waiting, the replay cache, sweeping
//
// Wait blocks on one LISTEN connection per Store, polling as the fallback
// ([design.md, "Waiting"]). With Options.ReplayCacheBytes, results replay
// from memory until their retention or a [Store.Forget] on any instance:
// forget keys with Forget or the CLI, never DELETE. From [New] until
// [Store.Close] the store sweeps abandoned claims and expired results on a
// jittered interval (Options.SweepInterval; negative: none).
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
