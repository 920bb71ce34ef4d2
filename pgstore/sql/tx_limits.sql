-- The bounds of a claim statement of a claim's transaction (BeginClaim),
-- sent in one round trip with it (and with the BEGIN, for the first one)
-- before each claim statement of the transaction: the claim, a look on a
-- newer snapshot, a takeover. sql/tx_restore.sql, sent right after the
-- claim statement, sets the bounds of the work's statements.
--
-- $1, lock_timeout in milliseconds, bounds how long the claim waits for
-- another open transaction that holds the key (the unique index makes a
-- second INSERT of the key wait for the first one's transaction, and a
-- takeover's UPDATE waits for its row lock; sql/claim.sql sets the same
-- value itself too), and it alone bounds that wait: statement_timeout is off for the claim
-- statement, so that neither TxLimits.Execution nor a statement_timeout of
-- the role's or the session's cancels a duplicate's wait (57014) before
-- its Wait, while the holder may be about to commit a result to replay.
-- The session's values of both are kept in idem.lock_timeout and
-- idem.statement_timeout, once a transaction (a later claim statement
-- finds the work's bounds in place, not the session's), for
-- sql/tx_restore.sql.
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
       set_config('lock_timeout', $1::text, true),
       set_config('statement_timeout', '0', true),
       set_config('idle_in_transaction_session_timeout', $2::text, true)
