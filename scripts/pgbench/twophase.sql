-- idem's two-phase path as the demo uses it with CompleteTx, generated
-- from pgstore's statements (pgstore/sql/claim.sql, complete.sql) by
-- TestPgbenchScriptsMatchTheStatements: the claim commits on its own,
-- then the invoice and the completion in a transaction: two commits,
-- five round trips.
\set k random(1, 9000000000000000000)
WITH lock AS (
    SELECT pg_try_advisory_xact_lock_shared((:k)::bigint # 'idem_keys'::regclass::oid::bigint) AS free
), ins AS (
    INSERT INTO idem_keys (scope, key, generation, state, fingerprint, owner, takeover, lease_end, created_at,
                            method, route, caller)
    SELECT '\x7363'::bytea::bytea, ('key/' || :k || '-' || :client_id)::text, nextval('idem_keys_generation_seq'), 'claimed', 'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'::text, 'pgbench'::text, false,
           coalesce(NULL::timestamptz, statement_timestamp()) + 30000000::bigint * interval '1 microsecond', coalesce(NULL::timestamptz, statement_timestamp()),
           nullif('POST'::text, ''), nullif('POST /invoices'::text, ''), nullif('pgbench'::text, '')
      FROM lock WHERE free
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING generation, lease_end
)
SELECT true, false, generation, lease_end, '', '', NULL::timestamptz, NULL::jsonb, coalesce(NULL::timestamptz, statement_timestamp()) FROM ins
UNION ALL
SELECT false, NOT (SELECT free FROM lock), generation, lease_end, state, fingerprint, expires_at, result, coalesce(NULL::timestamptz, statement_timestamp())
  FROM idem_keys WHERE scope = '\x7363'::bytea AND key = ('key/' || :k || '-' || :client_id) AND NOT EXISTS (SELECT FROM ins)
UNION ALL
SELECT false, true, 0, NULL, '', '', NULL, NULL, coalesce(NULL::timestamptz, statement_timestamp())
  FROM lock WHERE NOT free AND NOT EXISTS (SELECT FROM idem_keys WHERE scope = '\x7363'::bytea AND key = ('key/' || :k || '-' || :client_id));
BEGIN;
INSERT INTO invoices (customer, amount_cents) VALUES ('ACME', 12345);
UPDATE idem_keys
   SET state = 'completed',
       result = '{"status":201,"header":{"Content-Type":["application/json"]},"body":"{\"id\":\"inv_0000000000\",\"customer\":\"ACME\",\"amount_cents\":12345}"}'::jsonb,
       lease_end = NULL,
       completed_at = coalesce(NULL::timestamptz, statement_timestamp()),
       expires_at = CASE WHEN 86400000000::bigint < 0 THEN NULL
                         ELSE coalesce(NULL::timestamptz, statement_timestamp()) + 86400000000::bigint * interval '1 microsecond' END
 WHERE scope = '\x7363'::bytea AND key = ('key/' || :k || '-' || :client_id) AND generation = currval('idem_keys_generation_seq') AND state <> 'completed'
RETURNING CASE WHEN waited THEN pg_notify('idem_' || 'idem_keys'::regclass::oid, md5(scope || '\x00'::bytea || convert_to(key, 'UTF8'))) END;
COMMIT;
