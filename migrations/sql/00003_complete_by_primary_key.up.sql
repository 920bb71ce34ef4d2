-- Complete by the primary key, in one plain statement.
--
-- Version 2's completion function matched the claim with
-- "state = 'claimed'", which is also the predicate of the partial index on
-- lease_end. On a busy table, ANALYZE sees hardly a claim among the
-- completed rows and VACUUM leaves that index nearly empty, so the planner
-- took the partial index, filtering it on scope and key, over the primary
-- key. But the index does not stay empty: every completion leaves the
-- entry of the claimed version behind until the next vacuum, so each
-- completion read one entry per key completed since then, and cost more
-- than the one before (0.6 ms, then 2.4 ms 6,000 keys later, one client).
--
-- "state <> 'completed'" means the same (the check constraint allows two
-- states) and implies no partial index's predicate, so the primary key is
-- the only index that matches. pgstore's statements on one key say it the
-- same way.
--
-- pgstore now completes with a plain UPDATE (its sql/complete.sql), which
-- costs the server less than a call of this function, and calls the new
-- stale-claim function only when the UPDATE matched nothing: raising an
-- error needs PL/pgSQL. The completion function stays, fixed, for
-- instances of an earlier version during a rolling upgrade.
CREATE FUNCTION {{.StaleFunc}}(p_scope bytea, p_key text, p_generation bigint) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_current bigint;
BEGIN
    SELECT generation INTO v_current FROM {{.Table}} WHERE scope = p_scope AND key = p_key;
    RAISE EXCEPTION 'idem: stale claim: generation % no longer holds the key', p_generation
        USING ERRCODE = '{{.StaleState}}',
              DETAIL = 'current generation ' || coalesce(v_current, 0);
END
$fn$;

COMMENT ON FUNCTION {{.StaleFunc}}(bytea, text, bigint) IS
    'idem: raise SQLSTATE {{.StaleState}} for a generation that no longer holds its key';

CREATE OR REPLACE FUNCTION {{.CompleteFunc}}(
    p_scope bytea, p_key text, p_generation bigint, p_result jsonb,
    p_retention_us bigint, p_now timestamptz
) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now     timestamptz := {{now "p_now"}};
    v_waited  boolean;
BEGIN
    UPDATE {{.Table}}
       SET state = 'completed',
           result = p_result,
           lease_end = NULL,
           completed_at = v_now,
           expires_at = CASE WHEN p_retention_us < 0 THEN NULL
                             ELSE v_now + p_retention_us * interval '1 microsecond' END
     WHERE scope = p_scope AND key = p_key
       AND generation = p_generation AND state <> 'completed'
    RETURNING waited INTO v_waited;
    IF FOUND THEN
        -- Only when a waiter marked the row: see migration 2.
        IF v_waited THEN
            PERFORM pg_notify({{.ChannelSQL}}, {{payload "p_scope" "p_key"}});
        END IF;
        RETURN;
    END IF;
    PERFORM {{.StaleFunc}}(p_scope, p_key, p_generation);
END
$fn$;
