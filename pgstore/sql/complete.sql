-- Complete: record the result of the claim ($1, $2) of generation $3,
-- and notify if a waiter marked the row.
--
-- One plain UPDATE: the notification is in RETURNING, evaluated for the
-- updated row only, and delivered at commit. When it matches no row (the
-- generation no longer holds the key), Complete sends sql/stale.sql,
-- which raises SQLSTATE pgschema.StaleClaimSQLState; inside a caller's
-- transaction (CompleteTx) that error aborts it. The rare stale case
-- takes a second statement so that every completion does not pay for a
-- larger one: PostgreSQL sets a statement's plan up on every execution,
-- and a CTE that checks staleness and notifies in one statement, or a
-- call of the migrations' completion function, costs more to set up
-- than this plain UPDATE.
--
-- The statement is rendered twice. With .Large false (the common case),
-- $4 is the whole result as idem.Result encodes it (jsonb-safe: bytes
-- that jsonb cannot hold are base64), sent as text, so that no query exec
-- mode sends it as bytea. With .Large true, for a body from pgstore's
-- large-body size on (sent by execLarge), the JSON is built here around
-- the body: $4 is the result without its body (small JSON, as text), $7
-- the body as bytea, $8 whether it is text (idem.IsText). A large body is
-- then sent as it is, in one parameter, instead of being escaped into a
-- second copy in Go: with the whole JSON built in Go, a 10 MiB result
-- would be held 4 times at the peak of its first request; this way,
-- twice. For small bodies building the JSON here costs PostgreSQL more
-- than the copy saves, so they take the plain form. The JSON built here
-- is the shape idem.Result reads: "body" as a string, or "body_base64"
-- (PostgreSQL's base64 breaks lines, which are removed).
--
-- $5 is the retention in microseconds, negative meaning forever. On
-- "state <> 'completed'": see renew.sql.
UPDATE {{.Table}}
   SET state = 'completed',
{{- if .Large}}
       result = $4::jsonb || CASE WHEN coalesce(length($7::bytea), 0) = 0 THEN '{}'::jsonb
                                  WHEN $8::boolean THEN jsonb_build_object('body', convert_from($7::bytea, 'UTF8'))
                                  ELSE jsonb_build_object('body_base64', translate(encode($7::bytea, 'base64'), E'\n', ''))
                             END,
{{- else}}
       result = $4::jsonb,
{{- end}}
       lease_end = NULL,
       completed_at = {{now "$6"}},
       expires_at = CASE WHEN $5::bigint < 0 THEN NULL
                         ELSE {{now "$6"}} + $5::bigint * interval '1 microsecond' END
 WHERE scope = $1 AND key = $2 AND generation = $3 AND state <> 'completed'
RETURNING CASE WHEN waited THEN pg_notify({{.ChannelSQL}}, {{payload "scope" "key"}}) END
