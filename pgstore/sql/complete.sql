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
-- $4 is the whole result as idem.Result encodes it (jsonb-safe: bytes
-- that jsonb cannot hold are base64), sent as text, so that no query exec
-- mode sends it as bytea. A body from pgstore's large-body size on takes
-- sql/complete_large.sql instead, which builds the JSON in SQL around
-- the body sent as it is; for small bodies that costs more than the copy
-- it saves (store at 78-82% of idembench's floor, against 88-89% with
-- the JSON built in Go, in side-by-side runs).
--
-- $5 is the retention in microseconds, negative meaning forever. On
-- "state <> 'completed'": see renew.sql.
UPDATE {{.Table}}
   SET state = 'completed',
       result = $4::jsonb,
       lease_end = NULL,
       completed_at = {{now "$6"}},
       expires_at = CASE WHEN $5::bigint < 0 THEN NULL
                         ELSE {{now "$6"}} + $5::bigint * interval '1 microsecond' END
 WHERE scope = $1 AND key = $2 AND generation = $3 AND state <> 'completed'
RETURNING CASE WHEN waited THEN pg_notify({{.ChannelSQL}}, {{payload "scope" "key"}}) END
