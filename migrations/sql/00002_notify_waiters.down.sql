-- Back to version 1: the completion function notifies on every completion.
CREATE OR REPLACE FUNCTION {{.CompleteFunc}}(
    p_scope bytea, p_key text, p_generation bigint, p_result jsonb,
    p_retention_us bigint, p_now timestamptz
) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now     timestamptz := coalesce(p_now, statement_timestamp());
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
       AND generation = p_generation AND state = 'claimed';
    IF FOUND THEN
        PERFORM pg_notify({{.ChannelSQL}}, md5(p_scope || '\x00'::bytea || convert_to(p_key, 'UTF8')));
        RETURN;
    END IF;
    SELECT generation INTO v_current FROM {{.Table}} WHERE scope = p_scope AND key = p_key;
    RAISE EXCEPTION 'idem: stale claim: generation % no longer holds the key', p_generation
        USING ERRCODE = '{{.StaleState}}',
              DETAIL = 'current generation ' || coalesce(v_current, 0);
END
$fn$;

ALTER TABLE {{.Table}} DROP COLUMN waited;
