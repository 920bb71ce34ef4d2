-- Claim: insert the claim, or, if the key has a row, answer with that
-- row as the statement's snapshot shows it (a replay, a duplicate in
-- flight, or a row to take over, which sql/takeover.sql does).
--
-- The INSERT's ON CONFLICT DO NOTHING checks the primary key before it
-- writes: a key that has a row takes no lock and writes no tuple (the
-- sequence value drawn for the VALUES row is lost, which is harmless:
-- generations may have gaps, never repeats). The SELECT sees the
-- statement's snapshot. If the INSERT conflicts with a row that
-- committed after the snapshot (a concurrent first claim), the
-- statement returns no row; Claim then runs it again, on a newer
-- snapshot.
--
-- Taking a row over is rare (a crashed owner, or a retention run out
-- before the sweeper came), so it is a second statement rather than a
-- branch of this one: PostgreSQL sets a statement's plan up on every
-- execution, and a claim that also read the row in a CTE and took
-- expired rows over with ON CONFLICT DO UPDATE costs the server about
-- 30 µs more for every new key (pgbench, one client).
--
-- The INSERT also waits when the key was inserted by a transaction still
-- open: a claim in a transaction (BeginClaim), or, for the moment of its
-- commit, a concurrent first claim. $7, lock_timeout in milliseconds
-- (ClaimRequest.Wait, or TxLimits.Wait in BeginClaim; at least one),
-- bounds that wait: when it runs out the statement fails with 55P03, and
-- the claim is in flight. It is set in the statement's first step, which
-- the INSERT reads its row from, so it is in force before the INSERT can
-- wait, with no statement of its own in front of this one (a claim sent
-- alone, the first look of every request, is one statement); it lasts
-- for the statement's transaction: its own, or a claim's transaction,
-- where sql/tx_restore.sql puts the session's value back.
--
-- $8 to $10 are the request's labels (idem.Labels: method, route,
-- caller), stored for operators; empty is stored as null.
WITH bound AS (
    SELECT set_config('lock_timeout', $7::text, true)
), ins AS (
    INSERT INTO {{.Table}} (scope, key, generation, state, fingerprint, owner, takeover, lease_end, created_at,
                            method, route, caller)
    SELECT $1::bytea, $2::text, nextval('{{.Sequence}}'), 'claimed', $3::text, $4::text, false,
           {{now "$6"}} + $5::bigint * interval '1 microsecond', {{now "$6"}},
           nullif($8::text, ''), nullif($9::text, ''), nullif($10::text, '')
      FROM bound
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING generation, lease_end
)
SELECT true, generation, lease_end, '', '', NULL::timestamptz, NULL::jsonb, {{now "$6"}} FROM ins
UNION ALL
SELECT false, generation, lease_end, state, fingerprint, expires_at, result, {{now "$6"}}
  FROM {{.Table}} WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT FROM ins)
