-- CompleteLarge: Complete (sql/complete.sql) for a result whose body has
-- pgstore's large-body size or more, sent by execLarge.
--
-- The result's JSON is built here, not in Go: $4 is the result without
-- its body (status, header, unreplayable: small JSON, sent as text), $7
-- the body as bytea, $8 whether the body is text (idem.IsText). The body
-- is sent as it is, in one parameter, instead of being escaped into a
-- second copy in Go: with the whole JSON built in Go, a 10 MiB result
-- was held 4 times at the peak of its first request; with this
-- statement, twice. No parameter is a []byte meant as jsonb, which pgx
-- would send as bytea in the exec and simple-protocol modes. The JSON is
-- the shape idem.Result reads: "body" as a string, or "body_base64"
-- (PostgreSQL's base64 breaks lines, which are removed).
--
-- $5 is the retention in microseconds, negative meaning forever. On
-- "state <> 'completed'": see renew.sql.
UPDATE {{.Table}}
   SET state = 'completed',
       result = $4::jsonb || CASE WHEN coalesce(length($7::bytea), 0) = 0 THEN '{}'::jsonb
                                  WHEN $8::boolean THEN jsonb_build_object('body', convert_from($7::bytea, 'UTF8'))
                                  ELSE jsonb_build_object('body_base64', translate(encode($7::bytea, 'base64'), E'\n', ''))
                             END,
       lease_end = NULL,
       completed_at = {{now "$6"}},
       expires_at = CASE WHEN $5::bigint < 0 THEN NULL
                         ELSE {{now "$6"}} + $5::bigint * interval '1 microsecond' END
 WHERE scope = $1 AND key = $2 AND generation = $3 AND state <> 'completed'
RETURNING CASE WHEN waited THEN pg_notify({{.ChannelSQL}}, {{payload "scope" "key"}}) END
