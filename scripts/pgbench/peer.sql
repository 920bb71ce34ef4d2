-- The peer protocol: the two-transaction pattern of "Implementing
-- Stripe-like Idempotency Keys in Postgres" (brandur.org, 2017), which
-- most idempotency-key libraries for PostgreSQL follow. A first
-- transaction looks the key up with a locking read and inserts it when
-- absent (here the key is always new); a second writes the business row
-- and the response and unlocks the key. SERIALIZABLE, as that article
-- runs both. Two commits, eight round trips. (ON CONFLICT DO NOTHING
-- makes the first transaction safe to run again when pgbench retries the
-- script after a serialization failure of the second, which leaves the
-- key inserted.)
\set k random(1, 9000000000000000000)
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM peer_keys WHERE user_id = :client_id AND idempotency_key = 'key/' || :k FOR UPDATE;
INSERT INTO peer_keys (user_id, idempotency_key, locked_at, recovery_point, request_method, request_path, request_params)
VALUES (:client_id, 'key/' || :k, now(), 'started', 'POST', '/invoices', '{"customer":"ACME","amount_cents":12345}')
ON CONFLICT (user_id, idempotency_key) DO NOTHING
RETURNING id;
COMMIT;
BEGIN ISOLATION LEVEL SERIALIZABLE;
INSERT INTO invoices (customer, amount_cents) VALUES ('ACME', 12345);
UPDATE peer_keys SET locked_at = NULL, recovery_point = 'finished', response_code = 201,
       response_body = '{"id":"inv_0000000000","customer":"ACME","amount_cents":12345}'
 WHERE user_id = :client_id AND idempotency_key = 'key/' || :k;
COMMIT;
