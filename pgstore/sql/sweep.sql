-- Sweep: abandoned claims first, then expired results, .Batch
-- rows at most, each scan on its partial index. FOR UPDATE
-- re-checks the condition on the latest row version (a claim
-- renewed or taken over meanwhile is left alone); SKIP LOCKED lets
-- sweepers in several instances share the work without waiting or
-- deleting a row twice. Waiters of abandoned claims are notified, if
-- any marked the row.
--
-- The cost of a batch must not grow with the table. .Batch is the
-- batch size written in as an integer literal by Sweep, so that the
-- planner knows how few rows the scans return (with a parameter or
-- an expression it guesses a tenth of the table). And the DELETE
-- finds the doomed rows by their ctid (stable: they are locked
-- until the statement's transaction ends), a TID scan, rather than
-- by joining on (scope, key), which the planner answered with a
-- hash of the whole table (of every partition, on a partitioned
-- table): a batch of 1000 took seconds on a million-row backlog. On
-- a partitioned table the ctids are looked up in every partition
-- and the (scope, key) check keeps the rows that were chosen, so a
-- batch costs batch × partitions row lookups, never a table scan.
-- The rows of abandoned and expired are locked as doomed reads
-- them, so expired locks only the rows that fill the batch.
WITH abandoned AS (
    SELECT ctid, scope, key FROM {{.Table}}
     WHERE state = 'claimed' AND lease_end <= {{now "$1"}}
     ORDER BY lease_end LIMIT {{.Batch}}
       FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT ctid, scope, key FROM {{.Table}}
     WHERE state = 'completed' AND expires_at <= {{now "$1"}}
     ORDER BY expires_at LIMIT {{.Batch}}
       FOR UPDATE SKIP LOCKED
), doomed AS (
    (SELECT ctid, scope, key FROM abandoned
     UNION ALL
     SELECT ctid, scope, key FROM expired)
    LIMIT {{.Batch}}
), del AS (
    DELETE FROM {{.Table}} t
     WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM doomed))
       AND (t.scope, t.key) IN (SELECT scope, key FROM doomed)
    RETURNING t.scope, t.key, t.waited, t.state = 'claimed' AS abandoned
), n AS (
    SELECT pg_notify({{.ChannelSQL}}, {{payload "scope" "key"}}) FROM del WHERE abandoned AND waited
)
SELECT (SELECT count(*) FROM del WHERE abandoned), (SELECT count(*) FROM del WHERE NOT abandoned),
       (SELECT count(*) FROM n)
