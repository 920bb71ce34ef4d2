-- Keys: the most recently claimed rows, newest first, for operators (idem
-- keys). Each row's status is read on the statement clock: a claim is live
-- until its lease ends, then abandoned; a result is completed until it
-- expires, then expired. $1 is a scope, or null for every scope; $2 a LIKE
-- pattern on the key; $3 a status, or null for every one; $4 the most rows;
-- $5 the clock; $6 a key, or null for every key; $7 a key digest
-- (idem.KeyDigest: the first 16 hex digits of SHA-256 over scope, a NUL
-- byte and key), or null for every one. It scans the table: it is not for
-- a hot path.
SELECT scope, key, status, state, generation, fingerprint, owner, created_at, lease_end, completed_at, expires_at,
       method, route, caller
  FROM (SELECT scope, key, state, generation, fingerprint, owner, created_at, lease_end, completed_at, expires_at,
               method, route, caller,
               CASE WHEN state = 'claimed' AND lease_end > {{now "$5"}} THEN 'live'
                    WHEN state = 'claimed' THEN 'abandoned'
                    WHEN expires_at IS NULL OR expires_at > {{now "$5"}} THEN 'completed'
                    ELSE 'expired' END AS status
          FROM {{.Table}}
         WHERE ($1::bytea IS NULL OR scope = $1::bytea) AND key LIKE $2
           AND ($6::text IS NULL OR key = $6::text)
           AND ($7::text IS NULL
                OR left(encode(sha256(scope || '\x00'::bytea || convert_to(key, 'UTF8')), 'hex'), 16) = $7::text)) AS k
 WHERE $3::text IS NULL OR status = $3::text
 ORDER BY created_at DESC, scope, key
 LIMIT $4
