-- The idem claim table, its generation sequence, the indexes the sweeper
-- needs, and the completion function CompleteTx relies on.
--
-- This is a template: {{.Table}} and the other names are filled in by
-- migrations.Up from Options.Table, after validation as plain lower-case
-- identifiers, so they never need quoting. With Options.Partitions the
-- table is PARTITION BY HASH (scope, key): a key's row always lives in one
-- partition, and the primary key (scope, key) includes the partition key as
-- PostgreSQL requires.

-- Generations for every key of the table come from one sequence, so a
-- generation is never issued twice for a key: not after a release, a sweep,
-- a takeover or a restart (a sequence is never rolled back, and gaps are fine).
CREATE SEQUENCE {{.Sequence}} AS bigint;

CREATE TABLE {{.Table}} (
    scope        bytea       NOT NULL, -- who is asking (tenant, principal, session), the exact bytes of the Go string; keys never match across scopes
    key          text        NOT NULL, -- what is asked: idem.Key's encoding, at most idem.MaxKeyLen bytes
    generation   bigint      NOT NULL, -- fencing token of the current claim, from {{.Sequence}}
    state        text        NOT NULL, -- 'claimed' or 'completed'; an absent key has no row
    fingerprint  text        NOT NULL DEFAULT '', -- hash of the request; '' matches any request
    owner        text        NOT NULL DEFAULT '', -- who claimed it (host, process), for operators
    takeover     boolean     NOT NULL DEFAULT false, -- the current claim took the key over from a claim whose lease ran out
    lease_end    timestamptz,          -- claimed: when the lease runs out (database clock); null when completed
    result       jsonb,                -- completed: the idem.Result to replay; null when claimed
    created_at   timestamptz NOT NULL, -- when the current generation was claimed
    completed_at timestamptz,          -- completed: when the result was recorded
    expires_at   timestamptz,          -- completed: end of retention, null meaning forever; the sweeper deletes the row after it
    PRIMARY KEY (scope, key),
    CONSTRAINT {{.Base}}_state_check CHECK (
        (state = 'claimed' AND lease_end IS NOT NULL AND result IS NULL AND completed_at IS NULL AND expires_at IS NULL)
        OR (state = 'completed' AND lease_end IS NULL AND result IS NOT NULL AND completed_at IS NOT NULL)
    )
){{if .Partitions}} PARTITION BY HASH (scope, key){{end}};
{{range .Partitions}}
CREATE TABLE {{.Name}} PARTITION OF {{$.Table}} FOR VALUES WITH (MODULUS {{.Modulus}}, REMAINDER {{.Remainder}});{{end}}

COMMENT ON TABLE {{.Table}} IS 'idem: one row per claimed or completed (scope, key); absent keys have no row';
COMMENT ON COLUMN {{.Table}}.scope IS 'who is asking (tenant, principal, session), as the exact bytes of the Go string; keys never match across scopes';
COMMENT ON COLUMN {{.Table}}.key IS 'what is asked: the encoding of idem.Key, at most idem.MaxKeyLen bytes';
COMMENT ON COLUMN {{.Table}}.generation IS 'fencing token of the current claim, from {{.Sequence}}: never reused for a key';
COMMENT ON COLUMN {{.Table}}.state IS 'claimed or completed';
COMMENT ON COLUMN {{.Table}}.fingerprint IS 'hash of the request the key was claimed for; empty matches any request';
COMMENT ON COLUMN {{.Table}}.owner IS 'who claimed the key (host, process), for operators';
COMMENT ON COLUMN {{.Table}}.takeover IS 'the current claim took the key over from a claim whose lease had run out';
COMMENT ON COLUMN {{.Table}}.lease_end IS 'claimed: when the lease runs out, by the database clock; null when completed';
COMMENT ON COLUMN {{.Table}}.result IS 'completed: the recorded idem.Result (status, header, body) to replay; null when claimed';
COMMENT ON COLUMN {{.Table}}.created_at IS 'when the current generation was claimed';
COMMENT ON COLUMN {{.Table}}.completed_at IS 'completed: when the result was recorded';
COMMENT ON COLUMN {{.Table}}.expires_at IS 'completed: end of retention (null: forever); the key is absent after it and the sweeper deletes the row';

-- The sweeper's two scans, and the oldest-claim statistics: each partial
-- index holds only the rows of its state. Claims by (scope, key) use the
-- primary key. On a partitioned table each index is declared on the parent
-- and PostgreSQL creates it on every partition.
CREATE INDEX {{.Base}}_lease_end_idx ON {{.Table}} (lease_end) WHERE state = 'claimed';
CREATE INDEX {{.Base}}_expires_at_idx ON {{.Table}} (expires_at) WHERE state = 'completed';

-- {{.CompleteFunc}} records a result for the claim (p_scope, p_key,
-- p_generation), or raises SQLSTATE {{.StaleState}} when that generation no
-- longer holds the key. Raising (rather than returning false) is the point:
-- inside a caller's transaction the error aborts it, so business writes made
-- by an owner that lost its claim can never commit with it.
--
-- p_retention_us < 0 keeps the result forever. p_now replaces the database
-- clock when not null (tests only). The NOTIFY is delivered at commit, so
-- waiters wake only for results that really committed.
CREATE FUNCTION {{.CompleteFunc}}(
    p_scope bytea, p_key text, p_generation bigint, p_result jsonb,
    p_retention_us bigint, p_now timestamptz
) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now     timestamptz := coalesce(p_now, statement_timestamp());
    v_current bigint;
BEGIN
    UPDATE {{.Table}}
       SET state = 'completed',
           result = p_result,
           lease_end = NULL,
           completed_at = v_now,
           expires_at = CASE WHEN p_retention_us < 0 THEN NULL
                             ELSE v_now + p_retention_us * interval '1 microsecond' END
     WHERE scope = p_scope AND key = p_key
       AND generation = p_generation AND state = 'claimed';
    IF FOUND THEN
        PERFORM pg_notify({{.ChannelSQL}}, md5(p_scope || '\x00'::bytea || convert_to(p_key, 'UTF8')));
        RETURN;
    END IF;
    SELECT generation INTO v_current FROM {{.Table}} WHERE scope = p_scope AND key = p_key;
    RAISE EXCEPTION 'idem: stale claim: generation % no longer holds the key', p_generation
        USING ERRCODE = '{{.StaleState}}',
              DETAIL = 'current generation ' || coalesce(v_current, 0);
END
$fn$;

COMMENT ON FUNCTION {{.CompleteFunc}}(bytea, text, bigint, jsonb, bigint, timestamptz) IS
    'idem: complete a claim, raising SQLSTATE {{.StaleState}} when its generation is stale';
