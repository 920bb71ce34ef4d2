-- The labels of the request that claimed a key (idem.Labels): its method,
-- its route and a caller label that is not a secret, so that an operator
-- who has only a client's key can tell its rows in different scopes apart
-- (idem inspect --key, idem keys). Null when the claim gave none (an
-- adapter without them, or an instance of an earlier version during a
-- rolling upgrade); adding a nullable column without a default rewrites
-- no row.
ALTER TABLE {{.Table}}
    ADD COLUMN method text,
    ADD COLUMN route  text,
    ADD COLUMN caller text;

COMMENT ON COLUMN {{.Table}}.method IS 'the method of the request that claimed the current generation (HTTP method, or MCP method); null: not recorded';
COMMENT ON COLUMN {{.Table}}.route IS 'the endpoint of the request that claimed the current generation (route pattern or path, or MCP tool); null: not recorded';
COMMENT ON COLUMN {{.Table}}.caller IS 'who sent the request that claimed the current generation, a label that is not a secret (the principal); null: not recorded';
