-- idem's one-commit path (pgstore.BeginClaim, then Commit), statement for
-- statement as pgstore sends it (pgstore/sql/tx_limits.sql, claim.sql,
-- tx_restore.sql, complete.sql with .Tx), in its three round trips: BEGIN
-- with the bounds, the claim and the restore; the invoice; the completion
-- and COMMIT. The generation the claim drew is the
-- session's currval of the sequence: pgbench cannot read a result inside a
-- pipeline, and pgstore sends it as a parameter.
\set k random(1, 9000000000000000000)
\startpipeline
BEGIN;
SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true),
       set_config('lock_timeout', '5000', true),
       set_config('idle_in_transaction_session_timeout', '30000', true),
       set_config('statement_timeout',
                  CASE current_setting('statement_timeout') WHEN '0' THEN '300000'
                       ELSE current_setting('statement_timeout') END, true);
WITH ins AS (
    INSERT INTO idem_keys (scope, key, generation, state, fingerprint, owner, takeover, lease_end, created_at)
    VALUES ('\x7363'::bytea, 'key/' || :k || '-' || :client_id, nextval('idem_keys_generation_seq'), 'claimed', 'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', 'pgbench', false,
            statement_timestamp() + 30000000::bigint * interval '1 microsecond', statement_timestamp())
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING generation, lease_end
)
SELECT true, generation, lease_end, '', '', NULL::timestamptz, NULL::jsonb, statement_timestamp() FROM ins
UNION ALL
SELECT false, generation, lease_end, state, fingerprint, expires_at, result, statement_timestamp()
  FROM idem_keys WHERE scope = '\x7363'::bytea AND key = 'key/' || :k || '-' || :client_id AND NOT EXISTS (SELECT FROM ins);
SELECT set_config('lock_timeout', current_setting('idem.lock_timeout'), true);
\endpipeline
INSERT INTO invoices (customer, amount_cents) VALUES ('ACME', 12345);
\startpipeline
WITH upd AS (
UPDATE idem_keys
   SET state = 'completed',
       result = '{"status":201,"header":{"Content-Type":["application/json"]},"body":"{\"id\":\"inv_0000000000\",\"customer\":\"ACME\",\"amount_cents\":12345}"}'::jsonb,
       lease_end = NULL,
       completed_at = statement_timestamp(),
       expires_at = statement_timestamp() + 86400000000::bigint * interval '1 microsecond'
 WHERE scope = '\x7363'::bytea AND key = 'key/' || :k || '-' || :client_id AND generation = currval('idem_keys_generation_seq') AND state <> 'completed'
RETURNING scope, key, waited)
SELECT CASE WHEN waited THEN pg_notify('idem_' || 'idem_keys'::regclass::oid, md5(scope || convert_to(key, 'UTF8'))) END::text FROM upd
UNION ALL
SELECT idem_keys_stale('\x7363'::bytea, 'key/' || :k || '-' || :client_id, currval('idem_keys_generation_seq'))::text WHERE NOT EXISTS (SELECT FROM upd);
COMMIT;
\endpipeline
