package pgstore_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

// Teams set default_transaction_isolation on a role or a database. Under
// REPEATABLE READ or SERIALIZABLE the loser of a first-claim race (and of
// other races on a row) gets SQLSTATE 40001: the store must still decide
// every claim, never answer unavailable. The setting is made per connection
// here, never on the shared server.
func TestStrictDefaultIsolation(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"repeatable read", "serializable"} {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			_, schema := migrated(t)
			cfg := testdb.Config(t, schema)
			cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
			cfg.MaxConns = 32
			pool := testdb.NewPool(t, cfg)
			var got string
			if err := pool.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&got); err != nil || got != level {
				t.Fatalf("transaction_isolation = %q, %v; want %q", got, err, level)
			}
			s := newStore(t, pool, pgstore.Options{})
			for round := range 3 {
				k := key(fmt.Sprint("hot", round))
				var acquired, inFlight atomic.Int32
				var winner atomic.Pointer[idem.Token]
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: k, Fingerprint: "fp"})
						switch {
						case err != nil:
							t.Errorf("claim: %v", err)
						case c.Status == idem.Acquired:
							acquired.Add(1)
							winner.Store(&c.Token)
						case c.Status == idem.InFlight:
							inFlight.Add(1)
						default:
							t.Errorf("claim = %v", c.Status)
						}
					}()
				}
				close(start)
				wg.Wait()
				if acquired.Load() != 1 || inFlight.Load() != 31 {
					t.Fatalf("round %d: %d acquired, %d in flight; want 1 and 31", round, acquired.Load(), inFlight.Load())
				}
				// Writers racing on the winner's row: renewals against
				// the completion. Each either succeeds or is stale.
				tok := *winner.Load()
				var rw sync.WaitGroup
				for range 8 {
					rw.Add(1)
					go func() {
						defer rw.Done()
						if _, err := s.Renew(ctx, tok, 0); err != nil && !isStale(err) {
							t.Errorf("renew: %v", err)
						}
					}()
				}
				if err := s.Complete(ctx, tok, idem.Result{Status: 201}); err != nil {
					t.Errorf("complete: %v", err)
				}
				rw.Wait()
			}
		})
	}
}

func isStale(err error) bool {
	var se *idem.StaleClaimError
	return errors.As(err, &se)
}
