-- name: CreateInvoice :one
INSERT INTO invoices (customer, amount_cents) VALUES ($1, $2) RETURNING id;

-- name: CountInvoices :one
SELECT count(*) FROM invoices;
