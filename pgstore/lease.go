package pgstore

import (
	"context"
	"time"

	"github.com/idemkit/idem"
)

// Renew implements [idem.Store] in one statement. A claim whose lease ran
// out may still be renewed while nobody took the key over or swept it.
func (s *Store) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	if err := validate(tok.Scope, tok.Key); err != nil {
		return time.Time{}, err
	}
	var (
		leaseEnd *time.Time
		current  *int64
	)
	err := retrying(ctx, func() error {
		return s.pool.QueryRow(ctx, s.sql.renew,
			[]byte(tok.Scope), tok.Key.String(), tok.Generation, s.leaseOf(lease).Microseconds(), s.nowArg(),
		).Scan(&leaseEnd, &current)
	})
	if err != nil {
		return time.Time{}, unavailable("renew", err)
	}
	if leaseEnd == nil {
		return time.Time{}, staleErr(tok, current)
	}
	return *leaseEnd, nil
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
	if err := validate(tok.Scope, tok.Key); err != nil {
		return err
	}
	var (
		deleted int64
		current *int64
	)
	err := retrying(ctx, func() error {
		return s.pool.QueryRow(ctx, s.sql.release,
			[]byte(tok.Scope), tok.Key.String(), tok.Generation,
		).Scan(&deleted, &current, nil)
	})
	if err != nil {
		return unavailable("release", err)
	}
	if deleted == 0 {
		return staleErr(tok, current)
	}
	return nil
}
