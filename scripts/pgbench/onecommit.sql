-- idem's one-commit path (pgstore.BeginClaim, then Commit), generated
-- from pgstore's statements (pgstore/sql/tx_limits.sql, tx_lock.sql,
-- tx_claim.sql, tx_complete.sql) by TestPgbenchScriptsMatchTheStatements,
-- in its three round trips: BEGIN with the bounds, the key's lock and the
-- look; the invoice; the row written once with its result, and COMMIT.
-- The lock key is the random :k (pgstore sends the key's hash, a bigint);
-- the generation the look drew is the session's currval of the sequence
-- (pgbench cannot read a result inside a pipeline).
\set k random(1, 9000000000000000000)
\startpipeline
BEGIN;
SELECT set_config('idem.lock_timeout',
                  coalesce(nullif(current_setting('idem.lock_timeout', true), ''), current_setting('lock_timeout')), true),
       set_config('idem.statement_timeout',
                  coalesce(nullif(current_setting('idem.statement_timeout', true), ''), current_setting('statement_timeout')), true),
       set_config('lock_timeout', 5000::bigint::text, true),
       set_config('statement_timeout', '0', true),
       set_config('idle_in_transaction_session_timeout', 30000::bigint::text, true);
SELECT CASE WHEN pg_try_advisory_xact_lock((:k)::bigint # 'idem_keys'::regclass::oid::bigint) THEN false
            ELSE (SELECT true FROM (SELECT pg_advisory_xact_lock_shared((:k)::bigint # 'idem_keys'::regclass::oid::bigint)) AS waited)
       END;
SELECT t.generation IS NULL, false, coalesce(t.generation, 0), t.lease_end, coalesce(t.state, ''),
       coalesce(t.fingerprint, ''), t.expires_at, t.result, coalesce(NULL::timestamptz, statement_timestamp()),
       CASE WHEN t.generation IS NULL
              OR CASE WHEN t.state <> 'completed' THEN t.lease_end <= coalesce(NULL::timestamptz, statement_timestamp())
                      ELSE t.expires_at <= coalesce(NULL::timestamptz, statement_timestamp()) END
            THEN nextval('idem_keys_generation_seq') END,
       bounds.statement_timeout, bounds.sessions
  FROM (SELECT set_config('lock_timeout', current_setting('idem.lock_timeout'), true),
               (extract(epoch FROM set_config('statement_timeout',
                                              CASE current_setting('idem.statement_timeout') WHEN '0' THEN 300000::bigint::text
                                                   ELSE current_setting('idem.statement_timeout') END, true)::interval)
                * 1000)::bigint AS statement_timeout,
               current_setting('idem.statement_timeout') <> '0' AS sessions) AS bounds
  LEFT JOIN idem_keys AS t ON t.scope = '\x7363'::bytea AND t.key = ('key/' || :k || '-' || :client_id);
\endpipeline
INSERT INTO invoices (customer, amount_cents) VALUES ('ACME', 12345);
\startpipeline
INSERT INTO idem_keys (scope, key, generation, state, fingerprint, owner, takeover, result,
                        created_at, completed_at, expires_at, method, route, caller)
SELECT '\x7363'::bytea::bytea, ('key/' || :k || '-' || :client_id)::text, currval('idem_keys_generation_seq')::bigint, 'completed', 'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'::text, 'pgbench'::text, false::boolean,
        '{"status":201,"header":{"Content-Type":["application/json"]},"body":"{\"id\":\"inv_0000000000\",\"customer\":\"ACME\",\"amount_cents\":12345}"}'::jsonb,
        statement_timestamp()::timestamptz, coalesce(NULL::timestamptz, statement_timestamp()),
        CASE WHEN 86400000000::bigint < 0 THEN NULL ELSE coalesce(NULL::timestamptz, statement_timestamp()) + 86400000000::bigint * interval '1 microsecond' END,
        nullif('POST'::text, ''), nullif('POST /invoices'::text, ''), nullif('pgbench'::text, '')
 WHERE CASE WHEN 0::bigint = 0 THEN true ELSE idem_keys_stale('\x7363'::bytea, ('key/' || :k || '-' || :client_id), currval('idem_keys_generation_seq'))::text IS NULL END;
COMMIT;
\endpipeline
