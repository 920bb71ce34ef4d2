-- Renew: the new lease end, or null and the current generation.
-- "state <> 'completed'", not "state = 'claimed'", in every statement
-- on one key: see migration 3 (the planner must not take the partial
-- index on lease_end for it).
WITH upd AS (
    UPDATE {{.Table}} SET lease_end = {{now "$5"}} + $4::bigint * interval '1 microsecond'
     WHERE scope = $1 AND key = $2 AND generation = $3 AND state <> 'completed'
    RETURNING lease_end
)
SELECT (SELECT lease_end FROM upd), (SELECT generation FROM {{.Table}} WHERE scope = $1 AND key = $2)
