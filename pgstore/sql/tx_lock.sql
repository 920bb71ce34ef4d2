-- The claim of a claim's transaction (BeginClaim), after its bounds
-- (sql/tx_limits.sql): the key's lock, taken exclusively for the
-- transaction ($1, the key's hash; see sql/claim.sql), not a row. The
-- transaction writes the key's row once, in its final state with its
-- result, just before its commit (sql/tx_complete.sql), and a rollback or
-- a crash leaves nothing. A duplicate waits here, in PostgreSQL, for the
-- transaction that holds the lock to end, up to lock_timeout, and then
-- looks (sql/tx_claim.sql, the next statement, on a newer snapshot at
-- READ COMMITTED). A two-phase claim takes the same lock shared
-- (sql/claim.sql), so the two never run alongside. The lock is
-- transaction-scoped: released at commit or rollback, and safe behind a
-- transaction-mode pooler.
--
-- A duplicate waits for the lock shared: when the holder's transaction
-- ends, every duplicate waiting for it is granted at once and looks (a
-- replay, in the common case, needs nothing more), instead of taking the
-- key one after the other, each for a round trip. It answers whether the
-- claim waited, and so holds the lock shared only: if the look then finds
-- the key free (the holder rolled back), the claim does not hold it, and
-- BeginClaim rolls back and begins again (from the second time running,
-- after a short random pause: duplicates that waited together would
-- otherwise keep failing each other's exclusive try). At REPEATABLE READ
-- and SERIALIZABLE the transaction's snapshot was taken before the wait,
-- so the look cannot see what the holder committed: it finds the key free,
-- and begins again too; a result it finds was there at its snapshot, and
-- is answered.
SELECT CASE WHEN pg_try_advisory_xact_lock($1::bigint # '{{.Table}}'::regclass::oid::bigint) THEN false
            ELSE (SELECT true FROM (SELECT pg_advisory_xact_lock_shared($1::bigint # '{{.Table}}'::regclass::oid::bigint)) AS waited)
       END
