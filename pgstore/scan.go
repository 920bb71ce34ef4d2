package pgstore

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem"
)

// claimRow is the answer of sql/claim.sql: the claim inserted, or the row
// as the statement's snapshot saw it.
type claimRow struct {
	inserted            bool
	generation          int64
	leaseEnd, expiresAt *time.Time
	now                 time.Time // the statement's clock
	state, fingerprint  string
	result              resultColumn // completed: the recorded result
}

// resultColumn is a scan target for the result column (jsonb, null until
// completed) that decodes the JSON as pgx hands it over, from pgx's read
// buffer: a []byte target would copy it first, and a large body would be
// held once more. The decoding error is kept, not returned, so that a
// result that cannot be decoded fails only the operation that uses it
// (a claim takes an expired row over whatever it holds).
type resultColumn struct {
	res   idem.Result
	valid bool // not null
	err   error
}

var _ pgtype.BytesScanner = (*resultColumn)(nil)

// ScanBytes implements [pgtype.BytesScanner]; b is valid only during the
// call, and the decoded result keeps none of it.
func (c *resultColumn) ScanBytes(b []byte) error {
	*c = resultColumn{valid: b != nil}
	if c.valid {
		c.err = c.res.UnmarshalJSON(b)
	}
	return nil
}

// result returns the decoded result; a null column is an error.
func (c *resultColumn) result() (idem.Result, error) {
	switch {
	case !c.valid:
		return idem.Result{}, errors.New("completed without a result")
	case c.err != nil:
		return idem.Result{}, c.err
	}
	return c.res, nil
}

func orZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
