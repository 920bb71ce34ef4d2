-- Forget: delete unless a live claim and not forced; tell apart
-- "absent" from "refused". With Options.NoListen (.Notify false) it
-- sends no NOTIFY: nobody LISTENs, and the engine may have no pg_notify.
WITH del AS (
    DELETE FROM {{.Table}}
     WHERE scope = $1 AND key = $2
       AND ($3 OR state <> 'claimed' OR lease_end <= {{now "$4"}})
    RETURNING scope, key
), n AS (
    SELECT{{if .Notify}} pg_notify({{.ChannelSQL}}, {{payload "scope" "key"}}){{end}} FROM del
)
SELECT (SELECT count(*) FROM n), EXISTS (SELECT FROM {{.Table}} WHERE scope = $1 AND key = $2)
