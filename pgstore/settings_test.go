package pgstore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
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
			// Directly, even when the suite runs through a pooler:
			// PgBouncer refuses this startup parameter.
			cfg := testdb.DirectConfig(t, schema)
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
				acquired, inFlight, tok := claimRace(t, 32, func(int) (idem.Claim, error) {
					return s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: k, Fingerprint: "fp"})
				})
				if acquired != 1 || inFlight != 31 {
					t.Fatalf("round %d: %d acquired, %d in flight; want 1 and 31", round, acquired, inFlight)
				}
				// Writers racing on the winner's row: renewals against
				// the completion. Each either succeeds or is stale.
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

func TestNewValidatesListenOptions(t *testing.T) {
	t.Parallel()
	pool, _ := testdb.Pool(t)
	for name, opts := range map[string]pgstore.Options{
		"negative heartbeat":          {Heartbeat: -time.Second},
		"replay cache without LISTEN": {NoListen: true, ReplayCacheBytes: 1 << 20},
	} {
		if s, err := pgstore.New(pool, opts); err == nil {
			s.Close()
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// Without LISTEN/NOTIFY (CockroachDB, Citus workers, a pooled endpoint
// alone) the contract and the model-based test hold, with waits polling.
func TestContractWithoutListen(t *testing.T) {
	idemtest.Run(t, func(t *testing.T, clock *idemtest.Clock) idem.Store {
		pool, _ := migrated(t)
		return newStoreAt(t, pool, clock.Now, pgstore.Options{Retention: idemtest.Retention,
			PollInterval: 50 * time.Millisecond, NoListen: true})
	})
}

// With NoListen no connection ever LISTENs, and a duplicate still learns of
// the completion by polling, long before the hour-long poll interval.
func TestNoListenPolls(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, schema := migrated(t)
	cfg := testdb.Config(t, schema)
	cfg.ConnConfig.RuntimeParams["application_name"] = "nolisten-" + schema
	waiter := newStore(t, testdb.NewPool(t, cfg), pgstore.Options{NoListen: true, PollInterval: time.Hour})
	holder := newStore(t, pool, pgstore.Options{})
	c := mustClaim(t, ctx, holder, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: time.Hour}, idem.Acquired)
	polled := make(chan struct{})
	var once sync.Once
	pgstore.SetWaitPolled(waiter, func() { once.Do(func() { close(polled) }) })
	result := make(chan idem.Claim, 1)
	go func() {
		got, err := idem.ClaimWait(ctx, waiter, idem.ClaimRequest{Scope: "s", Key: key("a")}, 30*time.Second)
		if err != nil {
			t.Errorf("ClaimWait: %v", err)
		}
		result <- got
	}()
	// Once the waiter has polled, complete the key.
	<-polled
	if err := holder.Complete(ctx, c.Token, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if got := <-result; got.Status != idem.Completed {
		t.Fatalf("ClaimWait = %v, want the completed result", got.Status)
	}
	var listening int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`,
		"nolisten-"+schema).Scan(&listening); err != nil || listening != 0 {
		t.Fatalf("%d LISTEN connections with NoListen (%v), want 0", listening, err)
	}
}

// With NoListen, Forget sends no NOTIFY (the engine may have no pg_notify);
// without it, Forget notifies the other instances' replay caches.
func TestNoListenForgetsQuietly(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := migrated(t)
	for _, tc := range []struct {
		noListen bool
		want     int
	}{{true, 0}, {false, 1}} {
		s := newStore(t, pool, pgstore.Options{NoListen: tc.noListen})
		n := listenTo(t, ctx, pool, s)
		k := key(fmt.Sprint("forget-", tc.noListen))
		c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: k}, idem.Acquired)
		if err := s.Complete(ctx, c.Token, idem.Result{Status: 201}); err != nil {
			t.Fatal(err)
		}
		if got := n.since(t, ctx); len(got) != 0 {
			t.Fatalf("a completion nobody waited for notified %q", got)
		}
		if ok, err := s.Forget(ctx, "s", k, false); !ok || err != nil {
			t.Fatalf("forget = %v, %v", ok, err)
		}
		if got := n.since(t, ctx); len(got) != tc.want {
			t.Errorf("NoListen %v: Forget sent %q, want %d notifications", tc.noListen, got, tc.want)
		}
	}
}
