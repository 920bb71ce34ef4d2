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
-- and this one measured store at 86-88% of idembench's floor against
-- 73-79% for a CTE that checked staleness and notified in one statement
-- (which had replaced a call of the migrations' completion function,
-- costlier still).
--
-- The statement is rendered twice. With .Large false (the common case),
-- $4 is the whole result as idem.Result encodes it (jsonb-safe: bytes
-- that jsonb cannot hold are base64), sent as text, so that no query exec
-- mode sends it as bytea. With .Large true, for a body from pgstore's
-- large-body size on (sent by execLarge), the JSON is built here around
-- the body: $4 is the result without its body (small JSON, as text), $7
-- the body as bytea, $8 whether it is text (idem.IsText). A large body is
-- then sent as it is, in one parameter, instead of being escaped into a
-- second copy in Go: with the whole JSON built in Go, a 10 MiB result was
-- held 4 times at the peak of its first request; this way, twice. For
-- small bodies building the JSON here costs more than the copy saves
-- (store at 78-82% of idembench's floor, against 88-89% with the JSON
-- built in Go, in side-by-side runs). The JSON built here is the shape
-- idem.Result reads: "body" as a string, or "body_base64" (PostgreSQL's
-- base64 breaks lines, which are removed).
--
-- With .Tx true (a claim's transaction, pgstore.BeginClaim), the UPDATE is
-- in a CTE and the statement raises the stale-claim error itself when it
-- matched nothing: it travels with the COMMIT, in one round trip, and the
-- error must abort the transaction before the COMMIT behind it runs.
-- Otherwise a completion that matched nothing (the work itself deleted or
-- completed its claim's row: nothing else can change a row this
-- transaction inserted or took over and still locks) would be followed by
-- the COMMIT of the work's writes without a result.
--
-- $5 is the retention in microseconds, negative meaning forever. On
-- "state <> 'completed'": see renew.sql.
{{if .Tx}}WITH upd AS (
{{end -}}
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
{{- if .Tx}}
RETURNING scope, key, waited
)
SELECT CASE WHEN waited THEN pg_notify({{.ChannelSQL}}, {{payload "scope" "key"}}) END::text FROM upd
UNION ALL
SELECT {{.StaleFunc}}($1, $2, $3)::text WHERE NOT EXISTS (SELECT FROM upd)
{{- else}}
RETURNING CASE WHEN waited THEN pg_notify({{.ChannelSQL}}, {{payload "scope" "key"}}) END
{{- end}}
