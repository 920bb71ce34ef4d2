-- Renew: the new lease end, or null and the current generation.
WITH upd AS (
    UPDATE {{.Table}} SET lease_end = {{now "$5"}} + $4::bigint * interval '1 microsecond'
     WHERE scope = $1 AND key = $2 AND generation = $3 AND state = 'claimed'
    RETURNING lease_end
)
SELECT (SELECT lease_end FROM upd), (SELECT generation FROM {{.Table}} WHERE scope = $1 AND key = $2)
