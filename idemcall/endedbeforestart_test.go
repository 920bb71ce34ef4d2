package idemcall_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemcall"
	"github.com/idemkit/idem/internal/teststore"
)

// TestLeaseOverBeforeTheFunction: engine.TestSynctestLeaseOverBeforeTheWork
// through idemcall. A function that ignores its context is not called; Do
// fails with an *idemcall.UnavailableError for idem.ErrLeaseLost with a
// RetryAfter, and a retry runs the function once.
func TestLeaseOverBeforeTheFunction(t *testing.T) {
	t.Parallel()
	teststore.LeaseOverBeforeTheWork(t, func(t *testing.T, store idem.Store, opts engine.Options) {
		c := idemcall.New(store, idemcall.Options{Engine: opts})
		calls := 0
		fn := func(context.Context) (int, error) {
			calls++
			return 7, nil
		}
		_, _, err := idemcall.Do(t.Context(), c, idemcall.Call{Key: "k"}, fn)
		var unavailable *idemcall.UnavailableError
		if calls != 0 || !errors.As(err, &unavailable) || unavailable.RetryAfter <= 0 || !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("the function ran %d times; Do returned %v, want no run and an *idemcall.UnavailableError for idem.ErrLeaseLost with a RetryAfter", calls, err)
		}
		if v, replayed, err := idemcall.Do(t.Context(), c, idemcall.Call{Key: "k"}, fn); err != nil || v != 7 || replayed || calls != 1 {
			t.Fatalf("the retry returned %v, %v, %v and the function ran %d times; want 7 run once", v, replayed, err, calls)
		}
	})
}
