-- The bounds of a statement of Claim that may wait for a transaction
-- still open that holds the key (a claim in a transaction, BeginClaim):
-- sent before a claim statement with a Wait (sql/claim.sql, a duplicate
-- waiting for its original) and before every takeover (sql/takeover.sql,
-- whose UPDATE waits for such a transaction's row lock), in the same
-- round trip and the same implicit transaction (one pipeline, one Sync),
-- which the settings last for.
--
-- $1, lock_timeout in milliseconds (ClaimRequest.Wait), bounds that wait,
-- and it alone: statement_timeout is off, so that a role's or a session's
-- statement_timeout does not cancel the wait (57014) before its Wait, as
-- for a duplicate on the one-commit path (sql/tx_limits.sql). A claim
-- sent without a Wait (the first look) needs neither: sql/claim.sql sets
-- its own lock_timeout, a millisecond.
SELECT set_config('lock_timeout', $1::text, true),
       set_config('statement_timeout', '0', true)
