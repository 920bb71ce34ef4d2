-- Stale: raise the stale-claim error (SQLSTATE
-- pgschema.StaleClaimSQLState, naming the key's current generation) for
-- the claim ($1, $2) of generation $3, which the completion
-- (sql/complete.sql) found no longer holding its key. Inside a caller's transaction the error
-- aborts it, so the business writes of an owner that lost its claim
-- cannot commit.
SELECT {{.StaleFunc}}($1, $2, $3)
