-- Release: delete (notifying if a waiter marked the row), or
-- report the current generation. The last column, the count of
-- notifications, is there to make the n CTE run. On "state <>
-- 'completed'": see renew.sql.
WITH del AS (
    DELETE FROM {{.Table}} WHERE scope = $1 AND key = $2 AND generation = $3 AND state <> 'completed'
    RETURNING scope, key, waited
), n AS (
    SELECT pg_notify({{.ChannelSQL}}, {{payload "scope" "key"}}) FROM del WHERE waited
)
SELECT (SELECT count(*) FROM del), (SELECT generation FROM {{.Table}} WHERE scope = $1 AND key = $2), (SELECT count(*) FROM n)
