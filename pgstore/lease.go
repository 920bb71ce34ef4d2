package pgstore

import (
	"context"
	"time"

	"github.com/idemkit/idem"
)

// Renew implements [idem.Store] in one statement. A claim whose lease ran
// out may still be renewed while nobody took the key over or swept it.
func (s *Store) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	if err := (idem.ClaimRequest{Scope: tok.Scope, Key: tok.Key}).Validate(); err != nil {
		return time.Time{}, err
	}
	var r renewRow
	err := retrying(ctx, func() (err error) {
		r, err = s.sql.renew.query(ctx, s.pool, renewParams{scope: []byte(tok.Scope), key: tok.Key.String(),
			generation: tok.Generation, leaseMicros: s.leaseOf(lease).Microseconds(), now: s.nowArg()})
		return err
	})
	if err != nil {
		return time.Time{}, unavailable("renew", err)
	}
	if r.leaseEnd == nil {
		return time.Time{}, staleErr(tok, r.current)
	}
	return *r.leaseEnd, nil
}

// tokenParamsOf are the parameters that name tok's claim.
func tokenParamsOf(tok idem.Token) tokenParams {
	return tokenParams{scope: []byte(tok.Scope), key: tok.Key.String(), generation: tok.Generation}
}

func staleErr(tok idem.Token, current *int64) error {
	se := &idem.StaleClaimError{Token: tok}
	if current != nil {
		se.Current = *current
	}
	return se
}

// Release implements [idem.Store] in one statement, which notifies waiters.
func (s *Store) Release(ctx context.Context, tok idem.Token) error {
	if err := (idem.ClaimRequest{Scope: tok.Scope, Key: tok.Key}).Validate(); err != nil {
		return err
	}
	var r releaseRow
	err := retrying(ctx, func() (err error) {
		r, err = s.sql.release.query(ctx, s.pool, tokenParamsOf(tok))
		return err
	})
	if err != nil {
		return unavailable("release", err)
	}
	if r.deleted == 0 {
		return staleErr(tok, r.current)
	}
	return nil
}
