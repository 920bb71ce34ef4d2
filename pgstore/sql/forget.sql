-- Forget: delete unless a live claim and not forced, and, with $5 (a
-- generation, zero for any), only while the key holds that generation
-- (what an operator was shown); tell "absent" from "refused" by the
-- generation the key holds, read from the statement's snapshot (before the
-- delete). With Options.NoListen (.Notify false) it sends no NOTIFY: nobody
-- LISTENs, and the engine may have no pg_notify.
WITH del AS (
    DELETE FROM {{.Table}}
     WHERE scope = $1 AND key = $2
       AND ($3 OR state <> 'claimed' OR lease_end <= {{now "$4"}})
       AND ($5::bigint = 0 OR generation = $5)
    RETURNING scope, key
), n AS (
    SELECT{{if .Notify}} pg_notify({{.ChannelSQL}}, {{payload "scope" "key"}}){{end}} FROM del
)
SELECT (SELECT count(*) FROM n), (SELECT generation FROM {{.Table}} WHERE scope = $1 AND key = $2)
