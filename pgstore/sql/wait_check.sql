-- Wait's look at the key before it blocks on a notification,
-- which also marks a live claim as waited on, so that its
-- completion, release or sweep notifies: the channel the
-- statements notify on (so that a LISTEN on the channel of a
-- dropped table is noticed), and the microseconds left on the claim's lease, null if the key is not
-- (or, as far as this statement can tell, no longer) held by a live
-- claim, no row if absent.
--
-- The mark is written only if the statement's snapshot shows the
-- claim live and unmarked: the replay path and further waiters of a
-- marked claim write nothing. The UPDATE takes the row lock, so it
-- is ordered against the completer's UPDATE (or release's DELETE):
--   - the mark commits first: the completer's UPDATE, even one whose
--     snapshot is older, re-reads the row's latest version
--     (READ COMMITTED), sees waited and notifies at its commit;
--   - the completer's UPDATE comes first: the mark waits for the
--     completer's transaction (CompleteTx: the caller's commit) and
--     then re-checks the latest version: completed (or gone) means
--     no row is updated and the waiter does not block; rolled back
--     means the claim is still live and is marked.
-- An UPDATE that matched nothing although the snapshot showed a live
-- unmarked claim therefore means the row changed under us
-- (completed, released, taken over, or marked by another waiter):
-- null, Wait returns, and the caller looks again. A mark seen in the
-- snapshot is for the current claim (every new claim resets it), and
-- a completion after the snapshot updates that marked version, so
-- skipping the write is safe. On "state <> 'completed'": see renew.sql.
WITH cur AS (
    SELECT state, lease_end, waited FROM {{.Table}} WHERE scope = $1 AND key = $2
), mark AS (
    UPDATE {{.Table}} SET waited = true
     WHERE scope = $1 AND key = $2 AND state <> 'completed' AND lease_end > {{now "$3"}} AND NOT waited
       AND EXISTS (SELECT FROM cur WHERE state = 'claimed' AND lease_end > {{now "$3"}} AND NOT waited)
    RETURNING lease_end
)
SELECT {{.ChannelSQL}}, (extract(epoch FROM
          CASE WHEN state = 'claimed' AND lease_end > {{now "$3"}} AND waited THEN lease_end
               ELSE (SELECT lease_end FROM mark) END - {{now "$3"}}) * 1000000)::bigint
  FROM cur
