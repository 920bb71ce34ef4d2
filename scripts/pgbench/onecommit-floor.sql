-- One commit by hand, the plainest SQL with the same round trips as the
-- one-commit path: the claim with BEGIN, the invoice, the completion with
-- COMMIT; no bounds, no restore, no guard, no existing-row check.
\set k random(1, 9000000000000000000)
\startpipeline
BEGIN;
INSERT INTO idem_keys (scope, key, generation, state, fingerprint, owner, lease_end, created_at)
VALUES ('\x7363'::bytea, 'key/' || :k || '-' || :client_id, nextval('idem_keys_generation_seq'), 'claimed', 'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', 'pgbench', now() + interval '5 minutes', now())
ON CONFLICT (scope, key) DO NOTHING RETURNING generation;
\endpipeline
INSERT INTO invoices (customer, amount_cents) VALUES ('ACME', 12345);
\startpipeline
UPDATE idem_keys
   SET state = 'completed', result = '{"status":201}'::jsonb, lease_end = NULL, completed_at = now(), expires_at = now() + interval '1 day'
 WHERE scope = '\x7363'::bytea AND key = 'key/' || :k || '-' || :client_id AND generation = currval('idem_keys_generation_seq') AND state <> 'completed';
COMMIT;
\endpipeline
