package pgstore

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgschema"
)

// ErrLiveClaim is returned by [Store.Forget] for a key held by a claim whose
// lease has not run out, unless forced. It is [idem.ErrLiveClaim], which
// memstore's Forget returns too.
var ErrLiveClaim = idem.ErrLiveClaim

// ErrEncoding is matched by the error Claim returns on a database whose
// encoding is not UTF8, an [*EncodingError]: pgstore needs UTF8 (see
// EncodingError for why), and refuses to claim rather than run work whose
// result it could not record. migrations.Up refuses such a database too.
var ErrEncoding = pgschema.ErrEncoding

// EncodingError names the encoding of a database that is not UTF8. It
// matches [ErrEncoding].
type EncodingError = pgschema.EncodingError

// unavailable wraps a database error for callers: they see an
// *idem.UnavailableError naming the operation, which unwraps to the cause
// (so errors.Is(err, context.Canceled) still works).
func unavailable(op string, err error) error {
	return &idem.UnavailableError{Op: op, Err: fmt.Errorf("pgstore: %w", err)}
}

// staleFrom maps the stale-claim SQLSTATE (sql/stale.sql) to a stale-claim
// error.
func staleFrom(err error, tok idem.Token) (*idem.StaleClaimError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgschema.StaleClaimSQLState {
		return nil, false
	}
	se := &idem.StaleClaimError{Token: tok}
	_, _ = fmt.Sscanf(pgErr.Detail, "current generation %d", &se.Current)
	return se, true
}
