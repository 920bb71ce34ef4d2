-- The tables the pgbench scripts write, beside idem's (migrated by
-- scripts/pgbench.sh): the business table, and the peer protocol's key
-- table as that article defines it.
CREATE TABLE invoices (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer     text   NOT NULL,
    amount_cents bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now());
CREATE TABLE peer_keys (
    id              bigserial PRIMARY KEY,
    created_at      timestamptz NOT NULL DEFAULT now(),
    idempotency_key text        NOT NULL CHECK (char_length(idempotency_key) <= 100),
    last_run_at     timestamptz NOT NULL DEFAULT now(),
    locked_at       timestamptz DEFAULT now(),
    request_method  text        NOT NULL CHECK (char_length(request_method) <= 10),
    request_params  jsonb       NOT NULL,
    request_path    text        NOT NULL CHECK (char_length(request_path) <= 100),
    response_code   int,
    response_body   jsonb,
    recovery_point  text        NOT NULL CHECK (char_length(recovery_point) <= 50),
    user_id         bigint      NOT NULL);
CREATE UNIQUE INDEX peer_keys_user_id_idempotency_key ON peer_keys (user_id, idempotency_key);
