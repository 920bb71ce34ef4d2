-- The look of a claim's transaction (BeginClaim), sent after the key's
-- lock (sql/tx_lock.sql): the key's row, if it has one, and, if the key
-- is free or its row may be taken over (a two-phase claim whose lease ran
-- out, a result whose retention did), the generation of this claim. A row
-- of state '' when the key has none. At READ COMMITTED the statement's
-- snapshot is taken after the lock was granted, so it sees whatever the
-- lock's previous holder committed. It writes nothing: the row is
-- written at the completion (sql/tx_complete.sql).
--
-- It also puts the bounds of the work's statements in place, for the
-- statements after it: the session's lock_timeout, so that the work's
-- statements wait for locks as they would without idem; and
-- statement_timeout, which ends a statement that runs that long, for a
-- client that cannot end it itself: the session's if it has one (a
-- role's or a connection's), else $4, in milliseconds
-- (TxLimits.Execution, zero for none). It answers that statement_timeout,
-- in milliseconds, and whether it is the session's: the error that
-- reports a statement it cancelled says so (idem.TxLimitError).
SELECT t.generation IS NULL, false, coalesce(t.generation, 0), t.lease_end, coalesce(t.state, ''),
       coalesce(t.fingerprint, ''), t.expires_at, t.result, {{now "$3"}},
       CASE WHEN t.generation IS NULL
              OR CASE WHEN t.state <> 'completed' THEN t.lease_end <= {{now "$3"}}
                      ELSE t.expires_at <= {{now "$3"}} END
            THEN nextval('{{.Sequence}}') END,
       bounds.statement_timeout, bounds.sessions
  FROM (SELECT set_config('lock_timeout', current_setting('idem.lock_timeout'), true),
               (extract(epoch FROM set_config('statement_timeout',
                                              CASE current_setting('idem.statement_timeout') WHEN '0' THEN $4::bigint::text
                                                   ELSE current_setting('idem.statement_timeout') END, true)::interval)
                * 1000)::bigint AS statement_timeout,
               current_setting('idem.statement_timeout') <> '0' AS sessions) AS bounds
  LEFT JOIN {{.Table}} AS t ON t.scope = $1 AND t.key = $2
