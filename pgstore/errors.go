package pgstore

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgschema"
)

// unavailable wraps a database error for callers: they see an
// *idem.UnavailableError naming the operation, which unwraps to the cause
// (so errors.Is(err, context.Canceled) still works).
func unavailable(op string, err error) error {
	return &idem.UnavailableError{Op: op, Err: fmt.Errorf("pgstore: %w", err)}
}

// staleFrom maps the stale-claim SQLSTATE (sql/stale.sql) to a stale-claim
// error.
func staleFrom(err error, tok idem.Token) (*idem.StaleClaimError, bool) {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok || pgErr.Code != pgschema.StaleClaimSQLState {
		return nil, false
	}
	se := &idem.StaleClaimError{Token: tok}
	_, _ = fmt.Sscanf(pgErr.Detail, "current generation %d", &se.Current)
	return se, true
}
