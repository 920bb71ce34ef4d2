-- Claim: read the row; if it holds a live claim or a retained
-- result, answer from it without writing (a replay or a duplicate
-- takes no lock and writes no WAL). Otherwise insert, or take over a
-- row whose claim's lease or whose result's retention ran out.
--
-- The read sees the statement's snapshot. If the INSERT conflicts
-- with a row that committed after the snapshot (a concurrent first
-- claim), the statement returns either no row or a row by which the
-- claim should have succeeded; Claim detects both and runs the
-- statement again, on a newer snapshot. A generation is drawn only
-- when inserting or taking over; an attempt that conflicts wastes
-- one, which is harmless (gaps are allowed, reuse is impossible).
WITH cur AS (
    SELECT state, generation, fingerprint, lease_end, expires_at, result
      FROM {{.Table}} WHERE scope = $1 AND key = $2
), ins AS (
    INSERT INTO {{.Table}} AS t (scope, key, generation, state, fingerprint, owner, takeover, lease_end, created_at)
    SELECT $1::bytea, $2::text, nextval('{{.Sequence}}'), 'claimed', $3::text, $4::text, false,
           {{now "$6"}} + $5::bigint * interval '1 microsecond', {{now "$6"}}
     WHERE NOT EXISTS (
           SELECT FROM cur
            WHERE (state = 'claimed' AND lease_end > {{now "$6"}})
               OR (state = 'completed' AND (expires_at IS NULL OR expires_at > {{now "$6"}})))
    ON CONFLICT (scope, key) DO UPDATE
       SET generation = excluded.generation,
           state = 'claimed',
           fingerprint = excluded.fingerprint,
           owner = excluded.owner,
           takeover = (t.state = 'claimed'),
           lease_end = excluded.lease_end,
           result = NULL,
           waited = false,
           created_at = excluded.created_at,
           completed_at = NULL,
           expires_at = NULL
     WHERE (t.state = 'claimed' AND t.lease_end <= excluded.created_at)
        OR (t.state = 'completed' AND t.expires_at <= excluded.created_at)
    RETURNING t.generation, t.lease_end, t.takeover
)
SELECT true, generation, lease_end, takeover, '', '', NULL::timestamptz, NULL::jsonb, {{now "$6"}} FROM ins
UNION ALL
SELECT false, generation, lease_end, false, state, fingerprint, expires_at, result, {{now "$6"}}
  FROM cur WHERE NOT EXISTS (SELECT FROM ins)
