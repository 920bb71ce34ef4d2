-- The invoice alone, no idempotency: what the service costs without idem.
-- One transaction, three round trips (BEGIN, INSERT, COMMIT).
BEGIN;
INSERT INTO invoices (customer, amount_cents) VALUES ('ACME', 12345);
COMMIT;
