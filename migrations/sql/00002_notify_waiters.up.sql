-- Notify only when someone waits.
--
-- pg_notify in a committing transaction takes a database-wide lock at commit
-- (PreCommit_Notify) and holds it through the commit's WAL flush, so every
-- transaction that notifies commits one at a time: group commit is lost. Up
-- to version 1 every completion notified, whether or not anyone waited.
--
-- Now a waiter marks the row it waits on (waited = true, set by pgstore's
-- Wait in the statement that finds the claim live), and the completion
-- function, a release or a sweep of an abandoned claim notify only when the
-- mark is set. The row lock orders the two: the waiter's UPDATE and the
-- completer's UPDATE take the same row lock, and each sees the other's
-- committed version (READ COMMITTED re-reads the latest version of a row it
-- waited for). So either the completer sees the mark and notifies at
-- commit, or the waiter sees the completion and does not block. A new claim
-- of the key (first claim, takeover) starts unmarked.
--
-- Existing rows start unmarked. During a rolling upgrade, waiters in
-- instances still running the previous version do not mark, so they wake
-- by their poll interval instead of a notification until they are upgraded.
ALTER TABLE {{.Table}} ADD COLUMN waited boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN {{.Table}}.waited IS 'claimed: a waiter is blocked on this key, so completing or releasing it must notify; reset by each new claim';

CREATE OR REPLACE FUNCTION {{.CompleteFunc}}(
    p_scope bytea, p_key text, p_generation bigint, p_result jsonb,
    p_retention_us bigint, p_now timestamptz
) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now     timestamptz := coalesce(p_now, statement_timestamp());
    v_waited  boolean;
    v_current bigint;
BEGIN
    UPDATE {{.Table}}
       SET state = 'completed',
           result = p_result,
           lease_end = NULL,
           completed_at = v_now,
           expires_at = CASE WHEN p_retention_us < 0 THEN NULL
                             ELSE v_now + p_retention_us * interval '1 microsecond' END
     WHERE scope = p_scope AND key = p_key
       AND generation = p_generation AND state = 'claimed'
    RETURNING waited INTO v_waited;
    IF FOUND THEN
        -- Only when a waiter marked the row: see the migration's comment.
        IF v_waited THEN
            PERFORM pg_notify({{.ChannelSQL}}, md5(p_scope || '\x00'::bytea || convert_to(p_key, 'UTF8')));
        END IF;
        RETURN;
    END IF;
    SELECT generation INTO v_current FROM {{.Table}} WHERE scope = p_scope AND key = p_key;
    RAISE EXCEPTION 'idem: stale claim: generation % no longer holds the key', p_generation
        USING ERRCODE = '{{.StaleState}}',
              DETAIL = 'current generation ' || coalesce(v_current, 0);
END
$fn$;
