-- ClaimWait: wait, up to ClaimRequest.Wait, for the claim in a
-- transaction (BeginClaim) that holds the key's lock (see sql/claim.sql)
-- to end, sent after its bounds (sql/claim_limits.sql) in the same round
-- trip and implicit transaction, which the lock, taken shared, lasts for:
-- it is released as soon as the statement is answered. When Wait runs
-- out the statement fails with 55P03 and the key is in flight; otherwise
-- Claim looks again, and finds what the transaction committed, or
-- nothing if it rolled back.
SELECT pg_advisory_xact_lock_shared($1::bigint # '{{.Table}}'::regclass::oid::bigint)
