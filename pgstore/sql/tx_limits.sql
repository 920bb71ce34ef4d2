-- The bounds of a claim's transaction (BeginClaim), sent in one round
-- trip with its BEGIN and its claim, and again before each later claim
-- statement of the transaction (a look on a newer snapshot, a takeover).
--
-- $1, lock_timeout in milliseconds, bounds how long the claim waits for
-- another open transaction that holds the key (the unique index makes a
-- second INSERT of the key wait for the first one's transaction). It is
-- set for the claim alone: the session's value is kept in idem.lock_timeout
-- and put back by sql/tx_restore.sql, sent right after the claim, so the
-- work's own statements wait for locks as they would without idem.
--
-- $2 and $3, in milliseconds, bound the transaction on the server, for a
-- client that stops without a word (frozen, partitioned, killed without
-- its connection closing): idle_in_transaction_session_timeout ($2)
-- ends the session, and so rolls the transaction back, once it has been
-- idle that long; statement_timeout ($3, zero for none), unless the
-- session already has one, ends a statement that runs that long. The
-- engine ends the work's context at its deadline; these are for when it
-- cannot.
SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true),
       set_config('lock_timeout', $1::text, true),
       set_config('idle_in_transaction_session_timeout', $2::text, true),
       set_config('statement_timeout',
                  CASE current_setting('statement_timeout') WHEN '0' THEN $3::text
                       ELSE current_setting('statement_timeout') END, true)
