-- Claim: insert the claim, or, if the key has a row, answer with that
-- row as the statement's snapshot shows it (a replay, a duplicate in
-- flight, or a row to take over, which sql/takeover.sql does).
--
-- The key's lock ($7, the key's hash, see lockKey; mixed with the table's
-- oid so that the keys of two tables never share a lock) is what a claim
-- in a transaction (BeginClaim) holds, exclusively, from its claim to its
-- commit, without a row: its row is written once, with its result, just
-- before the commit (sql/tx_lock.sql, sql/tx_complete.sql). This statement takes the lock
-- shared, without waiting: if a transaction holds it, the key is in
-- flight there, and the statement inserts nothing and answers held (the
-- row it has, if any, for a replay, or a row of state '' if none). The
-- lock is the statement's own transaction's: it is released when the
-- claim commits, so the claim and a claim in a transaction never run
-- alongside. A wait for the key held in a transaction is Claim's, with
-- ClaimRequest.Wait (sql/claim_wait.sql): this statement sets no
-- lock_timeout, and waits for any lock that is not the key's (a
-- migration's on the table or a partition, the table's extension lock
-- under load) as any statement of the application does.
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
-- $8 to $10 are the request's labels (idem.Labels: method, route,
-- caller), stored for operators; empty is stored as null.
WITH lock AS (
    SELECT pg_try_advisory_xact_lock_shared($7::bigint # '{{.Table}}'::regclass::oid::bigint) AS free
), ins AS (
    INSERT INTO {{.Table}} (scope, key, generation, state, fingerprint, owner, takeover, lease_end, created_at,
                            method, route, caller)
    SELECT $1::bytea, $2::text, nextval('{{.Sequence}}'), 'claimed', $3::text, $4::text, false,
           {{now "$6"}} + $5::bigint * interval '1 microsecond', {{now "$6"}},
           nullif($8::text, ''), nullif($9::text, ''), nullif($10::text, '')
      FROM lock WHERE free
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING generation, lease_end
)
SELECT true, false, generation, lease_end, '', '', NULL::timestamptz, NULL::jsonb, {{now "$6"}} FROM ins
UNION ALL
SELECT false, NOT (SELECT free FROM lock), generation, lease_end, state, fingerprint, expires_at, result, {{now "$6"}}
  FROM {{.Table}} WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT FROM ins)
UNION ALL
SELECT false, true, 0, NULL, '', '', NULL, NULL, {{now "$6"}}
  FROM lock WHERE NOT free AND NOT EXISTS (SELECT FROM {{.Table}} WHERE scope = $1 AND key = $2)
