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
// # The table
//
// One row per present (scope, key), primary key (scope, key); an absent key
// has no row. The row holds the state ('claimed' or 'completed'), the
// generation, the fingerprint, the owner, the lease end (claimed), the
// result as jsonb (completed), and the created, completed and expiry times.
// Two partial indexes serve the sweeper: lease_end of claimed rows, and
// expires_at of completed rows. The SQL, with a comment on every column, is
// in migrations/sql.
//
// Generations come from one sequence per table. A sequence never goes back,
// not across transactions that roll back nor across crashes, so a
// generation is never issued twice for a key, whatever happened to its row.
//
// Every time is the database's: statements use statement_timestamp(), so
// instances with skewed clocks agree on when a lease ends. (Options.Now
// replaces it, in tests only.)
//
// The database must be UTF8 (the default of most installations): keys,
// recorded headers and bodies are stored as UTF-8 text and jsonb, which
// PostgreSQL holds and checks only in a UTF8 database. migrations.Up
// refuses any other encoding, and so does the first Claim of a Store (a
// *migrations.EncodingError naming the encoding, matching
// migrations.ErrEncoding), before any work runs.
//
// # Where the SQL is
//
// Every statement is a file in pgstore/sql, named for its operation:
// sql/claim.sql is Claim's (with sql/takeover.sql), sql/complete.sql
// Complete's and CompleteTx's (in two forms, the second for bodies of 64 KiB
// or more; and sql/stale.sql), then renew, release,
// sweep, wait_check and poll_check (Wait), inspect, forget, stats, channel
// and heartbeat (the LISTEN connection). BeginClaim sends claim.sql and
// takeover.sql between tx_limits.sql and tx_restore.sql, and completes with
// complete.sql's third form (.Tx). Each file starts with a comment
// explaining the statement; the comment is not sent.
// The files are embedded in the binary and rendered once, by New, with the
// names of the table's objects ({{.Table}} and the others) by the template
// mechanism the migrations use too (package internal/pgschema): the clock,
// {{now "$6"}}, and the NOTIFY payload naming a key,
// {{payload "scope" "key"}}, are written there once for both packages.
// Keys (sql/keys.sql) lists rows for operators.
//
// Each statement is bound to Go types, by hand: a parameters struct whose
// args method lists $1, $2, ... in order, and a row struct whose targets
// method lists the scan targets of its columns in order, both in
// queries.go; the field holding the rendered statement is typed by them
// (rowQuery, rowsQuery or execQuery, in scan.go), so a statement can only
// be sent with its parameters and read into its row. The tests hold the
// three places together: every file of sql/ must be registered (sql.go),
// its placeholders must be exactly $1 to the number of arguments, and
// PostgreSQL's description of it, on a migrated table, must agree with the
// types of those arguments and of the row's targets.
//
// The bindings are written by hand, not generated with sqlc (which river
// uses). sqlc reads plain SQL against a schema file, and these files are
// templates: the table and its objects are named per Store, the clock and
// the payload are template functions, complete.sql and forget.sql render
// in several forms, and the sweep writes its batch size in. Even rendered,
// sqlc v1.30 rejects five of them (four whose CTEs name the key twice, as
// 'column reference "scope" is ambiguous'; the sweep, for ctid). It would
// scan the result column into a []byte, a copy of every recorded body,
// where resultColumn decodes it from pgx's read buffer. And its batches
// repeat one statement, so the one-commit path (a claim between its
// transaction's bounds, in one pgx batch) would stay written by hand, as
// would the large-body completion (through pgconn, with its own encoding). What sqlc would check when generating, the tests check
// against PostgreSQL itself.
//
// # Claim: one statement, two to take over
//
// Claim sends one statement (sql/claim.sql): an insert that does nothing
// when the key has a row, and that row as the statement's snapshot shows it:
//
//	WITH bound AS (SELECT set_config('lock_timeout', $7, true)),
//	     ins AS (INSERT INTO t SELECT $1, $2, nextval(seq), 'claimed', … FROM bound
//	             ON CONFLICT (scope, key) DO NOTHING
//	             RETURNING generation, lease_end)
//	SELECT <the new claim> FROM ins
//	UNION ALL SELECT <the row> FROM t WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT FROM ins)
//
// A first request inserts. A retry of a completed request, or a duplicate of
// one in flight, is answered from the row: ON CONFLICT DO NOTHING checks the
// primary key before it writes, so it takes no lock and writes nothing
// (TestDuplicatesWriteNothing); the generation drawn for the VALUES row is
// lost, which is harmless (gaps are allowed, repeats impossible). The primary
// key makes "is it there?" and "it's mine" one atomic step.
//
// A row whose claim's lease or whose result's retention ran out is taken
// over by a second statement (sql/takeover.sql), conditioned on the
// generation the first one saw, with a new generation (Takeover reports a
// claim taken from an owner that did not finish). Takeovers are rare (a
// crashed owner, a retention run out before the sweeper came), and keeping
// them out of the claim statement makes it cheaper for the server to set
// up on every execution; see docs/performance.md.
//
// The read sees the statement's snapshot. When two first requests race, the
// loser's INSERT waits for the winner's row and then conflicts with it, but
// the row is not in the loser's snapshot: the statement returns nothing, and
// Claim runs it again on a newer snapshot. A takeover that finds the row
// changed (completed, renewed, taken by someone else) makes Claim look
// again too. TestClaimRaceTakesASecondRoundTrip forces the race, and
// TestRoundTrips counts one statement for a claim, a duplicate in flight,
// a replay, a renewal, a completion and a release, and two round trips for
// a takeover and for a stale completion.
//
// The INSERT waits like that for any transaction still open that inserted
// the key, and a takeover's UPDATE for one that locked the row: a claim in
// a transaction (BeginClaim) holds its key that way for as long as its
// work runs. ClaimRequest.Wait bounds such a wait (lock_timeout): when it
// runs out the claim is InFlight with a zero LeaseEnd, and the caller
// retries or waits on ([idem.ClaimWait], which the adapters use for a
// duplicate, passes what is left of its wait). The bound is set in the
// claim statement itself ($7 above: the set_config is evaluated before the
// INSERT reads its row, so before it can wait), a millisecond for a claim
// without a Wait (the first look of every request), which so stays one
// statement. A claim with a Wait, and every takeover, is sent after
// sql/claim_limits.sql, in the same round trip, which also turns
// statement_timeout off for it: a role's or session's statement_timeout
// shorter than the Wait would otherwise cancel the wait, an error, not an
// answer.
//
// Complete, Renew and Release are one statement each, conditioned on the
// generation and on the claim not being completed (state <> 'completed',
// so that the planner finds the key by the primary key; see
// sql/renew.sql). When no row matches, the same statement reads the key's
// current generation for the [*idem.StaleClaimError]; Complete's does not,
// and a second statement (sql/stale.sql, the stale-claim function of
// migration 3) raises that error, aborting a caller's transaction.
// Renew and Complete are allowed after the lease ran out as long as the
// generation is still current: nobody took the key over and no sweeper
// removed it.
//
// # Exactly once, in one commit: BeginClaim
//
// A handler whose side effect is a write to the same database can take the
// claim inside the transaction that writes it: [Store.BeginClaim] (the
// [idem.TxStore] the adapters' InTransaction option uses) begins a
// transaction and claims the key in it; the work writes through [TxFrom]
// (a pgx.Tx), or [SQLTxFrom] (the same transaction as a *sql.Tx, for
// database/sql and the layers on it: sqlc, GORM, sqlx, bun);
// [idem.TxClaim].Commit records the result and commits. The claim, the
// business rows and the result commit in one commit, or nothing does:
//
//	c, tx, err := store.BeginClaim(ctx, req, idem.TxLimits{Wait: 5 * time.Second})
//	// c.Status == idem.Acquired: tx is open
//	_, err = pgstore.TxFrom(tx.Context(ctx)).Exec(ctx, `INSERT INTO invoices …`)
//	err = tx.Commit(ctx, result) // or tx.Rollback(ctx): nothing is left
//
// A new key costs three round trips, as BEGIN, INSERT, COMMIT alone would:
// the BEGIN travels with the claim statement's bounds, the claim and the
// statement setting the work's bounds (one pipeline), the completion with
// the COMMIT (TestTxRoundTrips counts them). Until the commit the claim is
// invisible: a duplicate's INSERT waits, on the primary key, for the
// holder's transaction to end, bounded by TxLimits.Wait alone (lock_timeout,
// with statement_timeout off, for the claim statement only: neither
// TxLimits.Execution nor a role's or session's statement_timeout cuts the
// wait short); then it finds the result (the look that follows the wait
// goes with its ROLLBACK), or, after a rollback, takes the key. No NOTIFY
// and no polling is involved, and a duplicate holds a connection while it
// waits. A crash, a lost connection or any rollback leaves no row at all:
// no lease to wait out, nothing to sweep. TxLimits bound the transaction on
// the server too, for a process frozen with it open: TxLimits.Idle is its
// idle_in_transaction_session_timeout, TxLimits.Execution the
// statement_timeout of the work's statements (unless the session has one).
// When PostgreSQL ends the transaction at the first (25P03), or cancels a
// statement of the work at the second (57014), the work sees the error on
// its statement, and the claim's Rollback or Commit returns an
// [*idem.TxLimitError] that says which bound and its value: the work's
// statements go through [TxFrom]'s view, which notes their errors. Keys
// claimed or completed by Claim are answered as Claim answers them (a live
// two-phase claim is InFlight with its lease end, at once), an expired row
// is taken over inside the transaction, and a two-phase Claim of a key
// held in a transaction waits for it too, up to its ClaimRequest.Wait: the
// two never hold a key at once.
// Under REPEATABLE READ and SERIALIZABLE (Options.TxOptions) a duplicate
// that waited fails with a serialization error instead of finding the row;
// BeginClaim begins a new transaction and finds it there
// (TestBeginClaimStrictIsolation). It works through a transaction-mode
// pooler: everything is in one transaction.
//
// # Exactly once, with CompleteTx
//
// A handler whose side effect is a write to the same database can make it
// exactly once: it claims, then writes its business rows and records the
// result in one transaction, [Store.CompleteTx]:
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, `INSERT INTO invoices …`); err != nil {
//			return err
//		}
//		return store.CompleteTx(ctx, tx, claim.Token, result)
//	})
//
// Either both commit, and every retry replays the result, or neither does,
// and the key is still claimed by the same token (retry, or Release so the
// next request runs again). CompleteTx runs the completion statement
// (sql/complete.sql); when it finds that the token's generation no longer
// holds the key, a second statement (sql/stale.sql) raises SQLSTATE IDM01 in
// the same transaction. The error aborts the transaction: even a caller that ignores it
// cannot commit, so a slow owner whose lease ran out (and whose key was taken
// over) loses its business writes instead of duplicating them.
//
// The limits:
//   - Only writes in that transaction, in the same database, are covered.
//     An e-mail sent, an HTTP call made or a row written through another
//     connection is at most once only while the lease holds: renew long
//     work, and make external calls idempotent themselves (forward the key).
//   - The claim itself commits before the handler runs, so a crash between
//     claim and commit leaves a claim that blocks retries until its lease
//     runs out; then the work runs again, which is safe because nothing of
//     it committed. BeginClaim has no such window.
//   - Do not call CompleteTx inside a savepoint (a pgx nested transaction)
//     that the caller may roll back to: rolling back to the savepoint
//     discards the error, and the outer transaction could commit business
//     writes without a result. Pass the outermost transaction.
//   - Under REPEATABLE READ or SERIALIZABLE, a claim taken over after the
//     transaction's snapshot makes CompleteTx fail with a serialization
//     error (reported as unavailable): also a rollback, also safe. So does
//     a duplicate that starts waiting for the key after the snapshot was
//     taken (Wait marks the row; see Waiting): run the business
//     transaction at READ COMMITTED, or expect such a duplicate to cost the
//     original a rollback and the duplicate a takeover after the release
//     (TestWaiterAfterRepeatableReadSnapshot).
//
// # Waiting
//
// A NOTIFY is not free: PostgreSQL serialises the commits of transactions
// that notify (a database-wide lock held through the commit's WAL flush),
// so a completion that notified unconditionally would cost every first
// request its group commit. So Wait marks the row it waits on (column
// waited, set by the statement that finds the claim live, and only if its
// snapshot does not show it marked already), and Complete, Release and a
// sweep of an abandoned claim notify, in the same statement, only when the
// mark is set. The row lock orders the waiter's mark and the completer's
// UPDATE: if the mark commits first, the completer (READ COMMITTED re-reads
// the row it waited for) sees it and notifies at its commit; if the
// completer's UPDATE comes first, the mark waits for the completer's
// transaction (with CompleteTx, the caller's commit) and then finds the
// claim completed, and Wait returns without blocking; if that transaction
// rolls back, the claim is marked and waited on. Every new claim of a key
// starts unmarked. Forget always notifies (the replay caches of other
// instances follow it). TestWaitInterleavingsWithCompleteTx holds a
// completer's transaction open and registers a waiter before, during and
// after it.
//
// A NOTIFY is delivered at commit, so CompleteTx wakes waiters only if the
// transaction commits. The channel is
// "idem_" and the table's oid; the payload is an MD5 of scope and key. Each
// Store has one dedicated LISTEN connection, taken out of the pool (or a
// direct one, Options.ListenConfig, behind a transaction-mode pooler),
// shared by all its waiters, started by the first Wait, reconnected with
// backoff (waking every waiter, since notifications may have been lost) and
// stopped by Close. Wait subscribes, then reads the key once, and blocks
// until the key's notification, the holder's lease end, or
// Options.PollInterval: the polling fallback covers a change nobody
// notified. Instances wake each other: the NOTIFY goes through the database.
//
// The LISTEN connection can go deaf without failing: half-open, or
// LISTENing on the channel of a table that was dropped and created again.
// Every Options.Heartbeat the store notifies the statements' channel through
// the pool and expects to hear it within the same interval, and Wait's read
// of the key also returns the statements' channel; either mismatch replaces
// the connection. While no LISTEN is in effect (starting, reconnecting,
// deaf, or Options.NoListen, for engines without LISTEN/NOTIFY), Wait polls
// the key with a pause that doubles from 10ms up to Options.PollInterval,
// and switches to blocking if the LISTEN comes up.
//
// # Replay cache
//
// With Options.ReplayCacheBytes set, completed results are also kept in
// process, so that a retry of a completed request is answered without a
// round trip. That is safe because a completed result never changes while
// it is retained: it leaves the table only when its retention runs out or an
// operator forgets it. A cached result therefore lives until the retention
// the database reported when it was read (counted on the local monotonic
// clock from before the statement was sent, so never longer than the row),
// and until any instance's [Store.Forget] of the key, whose NOTIFY every
// instance's LISTEN connection delivers. To never miss such a notification,
// a result is cached only if the LISTEN was in effect before the statement
// that read it was sent and no notification for the key arrived meanwhile,
// and the whole cache is dropped when the LISTEN connection is lost.
//
// What the cache does not see: rows deleted or changed by hand in SQL, and a
// LISTEN connection that has silently stopped delivering, until the
// heartbeat detects it (within twice Options.Heartbeat, which bounds how
// long such a cache can serve a result forgotten elsewhere). Forget keys with [Store.Forget] (or the idem CLI), not
// with DELETE. The fingerprint is still compared, so a reused key with
// another request is a [*idem.MismatchError] as without the cache.
//
// [Store.ClaimFromCache] is the cache's answer alone, without I/O: the
// engine (and so the middleware and mcphttp) asks it before setting up the
// store timeout for [Store.Claim], which a replay from memory does not need.
//
// # Sweeping
//
// [Store.Sweep] deletes, in one statement, abandoned claims first and then
// expired results, at most limit rows, each selected on its partial index
// with FOR UPDATE SKIP LOCKED: sweepers in every instance share the work
// without waiting for each other or deleting a row twice, and a row renewed
// or taken over meanwhile is re-checked and left alone. [Store.Run] sweeps
// on an interval with jitter.
//
// # Isolation
//
// The statements are written for READ COMMITTED, PostgreSQL's default,
// where two writers racing on a row are settled by one waiting for the
// other. A connection whose default_transaction_isolation is REPEATABLE
// READ or SERIALIZABLE (a role or database setting) settles the same race
// with a serialization failure, SQLSTATE 40001, and nothing of the failed
// statement commits: the store runs it again, after a short random pause,
// on a new snapshot, where it decides as under READ COMMITTED (40P01,
// a deadlock, likewise). A claim race therefore still ends in one Acquired
// and InFlight for the others, never in unavailable
// (TestStrictDefaultIsolation). CompleteTx runs in the caller's
// transaction and is never retried: its 40001 is the caller's to roll back.
// BeginClaim retries its claim in a new transaction; a 40001 at the commit
// of a transaction it began is the caller's (the adapters answer 503, and
// nothing of the request is left).
//
// # Errors
//
// Invalid keys (and scopes over [idem.MaxScopeLen] bytes) are rejected before
// anything is sent; a database that is not UTF8, by Claim with a
// *migrations.EncodingError. Every database failure, including a cancelled context,
// is an [*idem.UnavailableError] naming the operation and wrapping the cause;
// no pgx error reaches callers unwrapped.
package pgstore
