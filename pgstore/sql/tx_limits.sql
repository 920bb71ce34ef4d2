-- The bounds of the claim of a claim's transaction (BeginClaim), sent in
-- one round trip with the BEGIN, the key's lock (sql/tx_lock.sql) and the
-- look (sql/tx_claim.sql), which puts the bounds of the work's statements
-- in place.
--
-- $1, lock_timeout in milliseconds (TxLimits.Wait), bounds how long the
-- claim waits for the key's lock, and it alone bounds that wait:
-- statement_timeout is off for the lock's statement (a statement's
-- timeout is armed when it starts, so it is set here, one statement
-- before), so that neither TxLimits.Execution nor a statement_timeout of
-- the role's or the session's cancels a duplicate's wait (57014) before
-- its Wait, while the holder may be about to commit a result to replay.
-- The session's values of both are kept in idem.lock_timeout and
-- idem.statement_timeout, once a transaction (a later claim finds the
-- work's bounds in place, not the session's), for the look.
--
-- $2, in milliseconds, is the transaction's
-- idle_in_transaction_session_timeout (TxLimits.Idle), for a client that
-- stops without a word (frozen, partitioned, killed without its
-- connection closing): PostgreSQL ends the session, and so rolls the
-- transaction back, once it has been idle that long.
SELECT set_config('idem.lock_timeout',
                  coalesce(nullif(current_setting('idem.lock_timeout', true), ''), current_setting('lock_timeout')), true),
       set_config('idem.statement_timeout',
                  coalesce(nullif(current_setting('idem.statement_timeout', true), ''), current_setting('statement_timeout')), true),
       set_config('lock_timeout', $1::bigint::text, true),
       set_config('statement_timeout', '0', true),
       set_config('idle_in_transaction_session_timeout', $2::bigint::text, true)
