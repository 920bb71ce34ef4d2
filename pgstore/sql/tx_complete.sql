-- The completion of a claim's transaction (BeginClaim), sent with its
-- COMMIT in one round trip: the key's row, written once, in its final
-- state, with its result ($4, as sql/complete.sql takes it; with .Large
-- the JSON is built here around the body, $15, text if $16, as there).
-- Until this statement the transaction held the key by its lock alone
-- (sql/tx_lock.sql), so nothing else wrote the row: one heap tuple and
-- its index entries (the primary key, expires_at's), no claimed row to
-- update.
--
-- $11 is the generation of the row the claim found and takes over (a
-- two-phase claim whose lease ran out, or a result whose retention did),
-- zero when the key had none.
--
-- Without .Takeover ($11 is zero, the common case: a new key) the row is
-- a plain INSERT. Under the key's lock no claim of this version writes the
-- key's row, so the INSERT meets no row; if one is there all the same (a
-- claim that does not take the lock: an older version's, in a rolling
-- upgrade), the primary key refuses it (23505), which BeginClaim's Commit
-- reads as the stale claim it is, and the transaction is rolled back. The
-- plain INSERT spares a new key the ON CONFLICT's speculative insertion
-- and the CTE around it (about 15% of the transaction at 16 clients, in
-- pgbench). Sent with a generation to take over (which Commit never does),
-- the WHERE raises the stale-claim error rather than insert nothing.
--
-- With .Takeover, ON CONFLICT updates that row only if it is still that
-- generation and still run out, by the statement's clock (its owner may
-- have completed or renewed it since, which the lock does not prevent: it
-- is the fencing the generation gives); otherwise nothing is written and
-- the statement raises the stale-claim error, which aborts the transaction
-- before the COMMIT behind it runs. If the row was deleted since
-- (released, swept), the key is free and the row is inserted.
--
-- $12 to $14 are the request's labels, as in sql/claim.sql.
{{- define "row"}}$1::bytea, $2::text, $3::bigint, 'completed', $7::text, $8::text, $9::boolean,
{{- if .Large}}
        $4::jsonb || CASE WHEN coalesce(length($15::bytea), 0) = 0 THEN '{}'::jsonb
                          WHEN $16::boolean THEN jsonb_build_object('body', convert_from($15::bytea, 'UTF8'))
                          ELSE jsonb_build_object('body_base64', translate(encode($15::bytea, 'base64'), E'\n', ''))
                     END,
{{- else}}
        $4::jsonb,
{{- end}}
        $10::timestamptz, {{now "$6"}},
        CASE WHEN $5::bigint < 0 THEN NULL ELSE {{now "$6"}} + $5::bigint * interval '1 microsecond' END,
        nullif($12::text, ''), nullif($13::text, ''), nullif($14::text, ''){{end}}
{{- if .Takeover}}
WITH ins AS (
    INSERT INTO {{.Table}} AS t (scope, key, generation, state, fingerprint, owner, takeover, result,
                                 created_at, completed_at, expires_at, method, route, caller)
    VALUES ({{template "row" .}})
    ON CONFLICT (scope, key) DO UPDATE
       SET generation = excluded.generation, state = 'completed', fingerprint = excluded.fingerprint,
           owner = excluded.owner, takeover = excluded.takeover, lease_end = NULL, result = excluded.result,
           waited = false, created_at = excluded.created_at, completed_at = excluded.completed_at,
           expires_at = excluded.expires_at, method = excluded.method, route = excluded.route,
           caller = excluded.caller
     WHERE t.generation = $11::bigint
       AND CASE WHEN t.state <> 'completed' THEN t.lease_end <= {{now "$6"}}
                ELSE t.expires_at <= {{now "$6"}} END
    RETURNING true
)
SELECT NULL::text FROM ins
UNION ALL
SELECT {{.StaleFunc}}($1, $2, $3)::text WHERE NOT EXISTS (SELECT FROM ins)
{{- else}}
INSERT INTO {{.Table}} (scope, key, generation, state, fingerprint, owner, takeover, result,
                        created_at, completed_at, expires_at, method, route, caller)
SELECT {{template "row" .}}
 WHERE CASE WHEN $11::bigint = 0 THEN true ELSE {{.StaleFunc}}($1, $2, $3)::text IS NULL END
{{- end}}
