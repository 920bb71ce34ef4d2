CREATE TABLE invoices (
    id           bigserial PRIMARY KEY,
    customer     text      NOT NULL,
    amount_cents bigint    NOT NULL
);
