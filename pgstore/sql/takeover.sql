-- Takeover: claim a key whose row the claim statement found expired
-- (a claim whose lease ran out, or a result whose retention did),
-- with a new generation. $7 is the generation the claim statement saw:
-- if the row changed since (completed, renewed, or taken over by
-- someone else), nothing is updated and Claim looks again.
--
-- The key's lock is taken shared, without waiting, as by the claim
-- statement (see sql/claim.sql), $8 the key's hash: if a claim in a
-- transaction holds it, nothing is updated, and Claim looks again (and
-- finds the key held).
--
-- $9 to $11 are the request's labels, as in sql/claim.sql.
--
-- takeover reports a claim taken from an owner that did not finish
-- (against a result whose retention ran out, which is a new request
-- like any other). On "state <> 'completed'": see renew.sql.
UPDATE {{.Table}} AS t
   SET generation = nextval('{{.Sequence}}'),
       state = 'claimed',
       fingerprint = $3::text,
       owner = $4::text,
       takeover = (t.state <> 'completed'),
       lease_end = {{now "$6"}} + $5::bigint * interval '1 microsecond',
       result = NULL,
       waited = false,
       created_at = {{now "$6"}},
       completed_at = NULL,
       expires_at = NULL,
       method = nullif($9::text, ''),
       route = nullif($10::text, ''),
       caller = nullif($11::text, '')
 WHERE scope = $1 AND key = $2 AND generation = $7
   AND CASE WHEN state <> 'completed' THEN lease_end <= {{now "$6"}}
            ELSE expires_at <= {{now "$6"}} END
   AND pg_try_advisory_xact_lock_shared($8::bigint # '{{.Table}}'::regclass::oid::bigint)
RETURNING generation, lease_end, takeover
