-- Complete: record the result of the claim ($1, $2) of generation $3,
-- notify if a waiter marked the row, or raise SQLSTATE
-- pgschema.StaleClaimSQLState (through the stale-claim function of
-- migration 3) when that generation no longer holds the key; inside a
-- caller's transaction (CompleteTx) the error aborts it.
--
-- One plain statement rather than a call of the migration's completion
-- function: the call and its nested UPDATE cost about 30 µs more of the
-- server's time per completion than this statement (measured with
-- pg_stat_statements, 16 clients), and the stale-claim function runs
-- only when the UPDATE matched nothing. The completion function stays,
-- with the same rules, for instances of an earlier version.
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
--
-- $5 is the retention in microseconds, negative meaning forever. On
-- "state <> 'completed'": see renew.sql. The last column, the count of
-- notifications, is there to make the woken CTE run.
WITH done AS (
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
    RETURNING scope, key, waited
), woken AS (
    SELECT pg_notify({{.ChannelSQL}}, {{payload "scope" "key"}}) FROM done WHERE waited
)
SELECT CASE WHEN NOT EXISTS (SELECT FROM done) THEN {{.StaleFunc}}($1, $2, $3) END,
       (SELECT count(*) FROM woken)
