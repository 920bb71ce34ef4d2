-- idem's two-phase path as the demo used it with CompleteTx: the claim
-- (pgstore/sql/claim.sql) commits on its own, then the invoice and the
-- completion (complete.sql) in a transaction: two commits, five round
-- trips.
\set k random(1, 9000000000000000000)
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
BEGIN;
INSERT INTO invoices (customer, amount_cents) VALUES ('ACME', 12345);
UPDATE idem_keys
   SET state = 'completed',
       result = '{"status":201,"header":{"Content-Type":["application/json"]},"body":"{\"id\":\"inv_0000000000\",\"customer\":\"ACME\",\"amount_cents\":12345}"}'::jsonb,
       lease_end = NULL,
       completed_at = statement_timestamp(),
       expires_at = statement_timestamp() + 86400000000::bigint * interval '1 microsecond'
 WHERE scope = '\x7363'::bytea AND key = 'key/' || :k || '-' || :client_id AND generation = currval('idem_keys_generation_seq') AND state <> 'completed'
RETURNING CASE WHEN waited THEN pg_notify('idem_' || 'idem_keys'::regclass::oid, md5(scope || convert_to(key, 'UTF8'))) END;
COMMIT;
