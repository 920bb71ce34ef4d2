-- Back to version 2: the completion function as migration 2 defined it,
-- and no stale-claim function.
CREATE OR REPLACE FUNCTION {{.CompleteFunc}}(
    p_scope bytea, p_key text, p_generation bigint, p_result jsonb,
    p_retention_us bigint, p_now timestamptz
) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now     timestamptz := {{now "p_now"}};
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
            PERFORM pg_notify({{.ChannelSQL}}, {{payload "p_scope" "p_key"}});
        END IF;
        RETURN;
    END IF;
    SELECT generation INTO v_current FROM {{.Table}} WHERE scope = p_scope AND key = p_key;
    RAISE EXCEPTION 'idem: stale claim: generation % no longer holds the key', p_generation
        USING ERRCODE = '{{.StaleState}}',
              DETAIL = 'current generation ' || coalesce(v_current, 0);
END
$fn$;

DROP FUNCTION {{.StaleFunc}}(bytea, text, bigint);
