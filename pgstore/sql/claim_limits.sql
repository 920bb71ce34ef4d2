-- The bounds of a statement of Claim that may wait for the key: sent
-- before sql/claim_wait.sql (a duplicate waiting for a claim in a
-- transaction still open, BeginClaim) and before every takeover
-- (sql/takeover.sql, whose UPDATE waits for the row lock of a caller's
-- transaction completing the row, CompleteTx), in the same round trip and
-- the same implicit transaction (one pipeline, one Sync), which the
-- settings last for.
--
-- $1, lock_timeout in milliseconds (ClaimRequest.Wait), bounds that wait,
-- and it alone: statement_timeout is off, so that a role's or a session's
-- statement_timeout does not cancel the wait (57014) before its Wait, as
-- for a duplicate on the one-commit path (sql/tx_limits.sql, sql/tx_lock.sql). The claim
-- statement itself (sql/claim.sql) needs neither: it never waits for the
-- key.
SELECT set_config('lock_timeout', $1::bigint::text, true),
       set_config('statement_timeout', '0', true)
