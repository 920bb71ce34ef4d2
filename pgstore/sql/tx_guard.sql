-- Before the completion of a claim's transaction (sql/complete.sql, then
-- COMMIT, sent in one round trip with this statement): raise the
-- stale-claim error unless the transaction still holds the claim ($1, $2)
-- of generation $3. The completion cannot then match nothing: the row was
-- inserted or taken over by this transaction, which holds its lock, and no
-- other transaction can change it. Without the check, a completion that
-- matched nothing (the work itself deleted or completed the row) would be
-- followed by the COMMIT already on its way, and the work's writes would
-- commit without a result. The error aborts the transaction, so the
-- COMMIT behind it is not run.
SELECT {{.StaleFunc}}($1, $2, $3)
 WHERE NOT EXISTS (SELECT FROM {{.Table}}
                    WHERE scope = $1 AND key = $2 AND generation = $3 AND state <> 'completed')
