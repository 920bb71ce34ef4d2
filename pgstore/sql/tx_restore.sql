-- The bounds of the work's statements in a claim's transaction, sent
-- right after each claim statement (see sql/tx_limits.sql): the session's
-- lock_timeout, so that the work's statements wait for locks as they
-- would without idem; and statement_timeout, which ends a statement that
-- runs that long, for a client that cannot end it itself: the session's
-- if it has one (a role's or a connection's), else $1, in milliseconds
-- (TxLimits.Execution, zero for none).
--
-- It answers that statement_timeout, in milliseconds, and whether it is
-- the session's: the error that reports a statement it cancelled says so
-- (idem.TxLimitError).
SELECT set_config('lock_timeout', current_setting('idem.lock_timeout'), true),
       (extract(epoch FROM set_config('statement_timeout',
                                      CASE current_setting('idem.statement_timeout') WHEN '0' THEN $1::text
                                           ELSE current_setting('idem.statement_timeout') END, true)::interval)
        * 1000)::bigint,
       current_setting('idem.statement_timeout') <> '0'
