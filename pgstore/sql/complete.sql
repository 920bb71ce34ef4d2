-- Complete: the completion function of the migration, which raises
-- SQLSTATE pgschema.StaleClaimSQLState for a stale generation
-- (aborting a caller's transaction) and notifies waiters.
--
-- The result's JSON is built here, not in Go: $4 is the result
-- without its body (status, header, unreplayable: small JSON, sent
-- as text), $7 the body as bytea, $8 whether the body is text
-- (idem.IsText). The body is then sent as it is, in one parameter,
-- instead of being escaped into a second copy in Go; and no
-- parameter is a []byte meant as jsonb, which pgx would send as
-- bytea in the exec and simple-protocol modes. The JSON is the
-- shape idem.Result reads: "body" as a string, or "body_base64"
-- (PostgreSQL's base64 breaks lines, which are removed).
SELECT {{.CompleteFunc}}($1, $2, $3,
       $4::jsonb || CASE WHEN coalesce(length($7::bytea), 0) = 0 THEN '{}'::jsonb
                         WHEN $8::boolean THEN jsonb_build_object('body', convert_from($7::bytea, 'UTF8'))
                         ELSE jsonb_build_object('body_base64', translate(encode($7::bytea, 'base64'), E'\n', ''))
                    END,
       $5, $6::timestamptz)
