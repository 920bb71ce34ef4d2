-- Inspect: the row of (scope, key) as stored, whatever its state, for
-- operators.
SELECT state, generation, fingerprint, owner, created_at, lease_end, completed_at, expires_at, result,
       method, route, caller
  FROM {{.Table}} WHERE scope = $1 AND key = $2
