-- The bare minimum of any durable dedupe: the invoice and one key row
-- holding its answer, in one transaction, with the round trips of the
-- invoice alone (BEGIN, INSERT, then the key's row with COMMIT); no claim,
-- no bounds, no look, no guard.
\set k random(1, 9000000000000000000)
BEGIN;
INSERT INTO invoices (customer, amount_cents) VALUES ('ACME', 12345);
\startpipeline
INSERT INTO idem_keys (scope, key, generation, state, fingerprint, owner, result, created_at, completed_at, expires_at)
VALUES ('\x7363'::bytea, 'key/' || :k || '-' || :client_id, nextval('idem_keys_generation_seq'), 'completed', 'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', 'pgbench',
        '{"status":201,"header":{"Content-Type":["application/json"]},"body":"{\"id\":\"inv_0000000000\",\"customer\":\"ACME\",\"amount_cents\":12345}"}'::jsonb,
        now(), now(), now() + interval '1 day');
COMMIT;
\endpipeline
