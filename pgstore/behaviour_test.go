package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

func key(s string) idem.Key { return idem.KeyFromRequestID(idem.StringRequestID(s)) }

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// secondPool opens another pool (another "instance") on schema.
func secondPool(t *testing.T, schema string) *pgxpool.Pool {
	t.Helper()
	return testdb.NewPool(t, testdb.Config(t, schema))
}

func mustClaim(t *testing.T, ctx context.Context, s idem.Store, req idem.ClaimRequest, want idem.ClaimStatus) idem.Claim {
	t.Helper()
	c, err := s.Claim(ctx, req)
	if err != nil {
		t.Fatalf("claim %q: %v", req.Key, err)
	}
	if c.Status != want {
		t.Fatalf("claim %q = %v, want %v", req.Key, c.Status, want)
	}
	return c
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	pool, _ := testdb.Pool(t)
	for name, tc := range map[string]struct {
		opts pgstore.Options
		want string // what the error must name
	}{
		"bad table":      {pgstore.Options{Table: "Robert'); DROP TABLE students;--"}, "Robert"},
		"three parts":    {pgstore.Options{Table: "a.b.c"}, "a.b.c"},
		"negative lease": {pgstore.Options{Lease: -time.Second}, "Options.Lease"},
		"negative poll":  {pgstore.Options{PollInterval: -time.Second}, "Options.PollInterval"},
		"negative cache": {pgstore.Options{ReplayCacheBytes: -1}, "Options.ReplayCacheBytes"},
	} {
		if _, err := pgstore.New(pool, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error naming %s", name, err, tc.want)
		}
	}
	if _, err := pgstore.New(nil, pgstore.Options{}); err == nil {
		t.Error("New(nil pool) succeeded")
	}
	s, err := pgstore.New(pool, pgstore.Options{Table: "ops.idem_keys"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close() // idempotent
}

func TestSchemaQualifiedTable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, schema := testdb.Pool(t)
	table := schema + ".claims"
	if err := migrationsUp(ctx, sessionPool(t, pool, schema), table); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool, pgstore.Options{Table: table})
	c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.Acquired)
	if err := s.Complete(ctx, c.Token, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE state = 'completed'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("completed rows in %s = %d, %v; want 1", table, n, err)
	}
}

func TestResultsSurviveReopeningThePool(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, schema := migrated(t)
	s := newStore(t, pool, pgstore.Options{})
	res := idem.Result{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"b": 1,  "a":2}`)}
	c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("done"), Fingerprint: "fp"}, idem.Acquired)
	if err := s.Complete(ctx, c.Token, res); err != nil {
		t.Fatal(err)
	}
	live := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("live")}, idem.Acquired)
	s.Close()
	pool.Close()

	s2 := newStore(t, secondPool(t, schema), pgstore.Options{})
	got := mustClaim(t, ctx, s2, idem.ClaimRequest{Scope: "s", Key: key("done"), Fingerprint: "fp"}, idem.Completed)
	if !got.Result.Equal(res) {
		t.Errorf("replayed %+v, want %+v", got.Result, res)
	}
	// The claim survives too, and its token still works in the new
	// process (nothing in the token is process-local).
	mustClaim(t, ctx, s2, idem.ClaimRequest{Scope: "s", Key: key("live")}, idem.InFlight)
	if err := s2.Complete(ctx, live.Token, idem.Result{Status: 200}); err != nil {
		t.Fatalf("complete with a token from before the restart: %v", err)
	}
}

// An owner that vanished without releasing (its process and pool gone):
// another instance takes the key over once the lease ran out, and the
// sweeper removes such claims.
func TestOwnerVanished(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		sweep bool
	}{{"TakeoverAfterLease", false}, {"SweeperRemovesIt", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			clock := idemtest.NewClock()
			pool, schema := migrated(t)
			owner := newStoreAt(t, pool, clock.Now, pgstore.Options{})
			c := mustClaim(t, ctx, owner, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: 10 * time.Second}, idem.Acquired)
			owner.Close()
			pool.Close()

			other := newStoreAt(t, secondPool(t, schema), clock.Now, pgstore.Options{})
			mustClaim(t, ctx, other, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.InFlight)
			clock.Advance(10 * time.Second)
			if tc.sweep {
				st, err := other.Sweep(ctx, 0)
				if err != nil || st != (idem.SweepStats{Abandoned: 1}) {
					t.Fatalf("sweep = %+v, %v; want 1 abandoned", st, err)
				}
				if _, ok, err := other.Inspect(ctx, "s", key("a")); ok || err != nil {
					t.Fatalf("after sweep: present %v, %v", ok, err)
				}
			}
			got := mustClaim(t, ctx, other, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.Acquired)
			if got.Takeover == tc.sweep {
				t.Errorf("takeover = %v after sweep=%v", got.Takeover, tc.sweep)
			}
			if got.Token.Generation <= c.Token.Generation {
				t.Errorf("generation %d, want > %d", got.Token.Generation, c.Token.Generation)
			}
			var se *idem.StaleClaimError
			if err := other.Complete(ctx, c.Token, idem.Result{}); !errors.As(err, &se) || se.Current != got.Token.Generation {
				t.Errorf("complete with the vanished owner's token = %v, want stale with current %d", err, got.Token.Generation)
			}
		})
	}
}

func TestOneAcquiredAmong64GoroutinesOn4Pools(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, schema := migrated(t)
	stores := []*pgstore.Store{newStore(t, pool, pgstore.Options{})}
	for range 3 {
		stores = append(stores, newStore(t, secondPool(t, schema), pgstore.Options{}))
	}
	for round := range 3 { // a fresh key, a released key, a completed-and-forgotten key
		k := key(fmt.Sprint("hot", round))
		acquired, inFlight, _ := claimRace(t, 64, func(i int) (idem.Claim, error) {
			return stores[i%4].Claim(ctx, idem.ClaimRequest{Scope: "s", Key: k, Fingerprint: "fp"})
		})
		if acquired != 1 || inFlight != 63 {
			t.Fatalf("round %d: %d acquired, %d in flight; want 1 and 63", round, acquired, inFlight)
		}
	}
}

// claimRace runs n claims at once, claim(0) … claim(n-1), and counts the
// outcomes; winner is the token of an Acquired one. Any other outcome fails t.
func claimRace(t *testing.T, n int, claim func(i int) (idem.Claim, error)) (acquired, inFlight int, winner idem.Token) {
	t.Helper()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := claim(i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("claim: %v", err)
			case c.Status == idem.Acquired:
				acquired++
				winner = c.Token
			case c.Status == idem.InFlight:
				inFlight++
			default:
				t.Errorf("claim = %v", c.Status)
			}
		}()
	}
	close(start)
	wg.Wait()
	return acquired, inFlight, winner
}

func TestCompleteTx(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (context.Context, *pgxpool.Pool, *pgstore.Store, *idemtest.Clock) {
		t.Helper()
		t.Parallel()
		ctx := testCtx(t)
		pool, _ := migrated(t)
		if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id text PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		clock := idemtest.NewClock()
		return ctx, pool, newStoreAt(t, pool, clock.Now, pgstore.Options{}), clock
	}
	invoices := func(t *testing.T, ctx context.Context, pool *pgxpool.Pool) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	res := idem.Result{Status: 201, Body: []byte(`{"id":"inv-1"}`)}

	t.Run("CommitsTogether", func(t *testing.T) {
		ctx, pool, s, _ := setup(t)
		c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.Acquired)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO invoices VALUES ('inv-1')`); err != nil {
				return err
			}
			return s.CompleteTx(ctx, tx, c.Token, res)
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := invoices(t, ctx, pool); n != 1 {
			t.Errorf("%d invoices, want 1", n)
		}
		got := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.Completed)
		if !got.Result.Equal(res) {
			t.Errorf("result %+v", got.Result)
		}
	})

	t.Run("RolledBackLeavesTheKeyClaimed", func(t *testing.T) {
		ctx, pool, s, _ := setup(t)
		c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.Acquired)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO invoices VALUES ('inv-1')`); err != nil {
			t.Fatal(err)
		}
		if err := s.CompleteTx(ctx, tx, c.Token, res); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if n := invoices(t, ctx, pool); n != 0 {
			t.Errorf("%d invoices after rollback, want 0", n)
		}
		mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.InFlight)
		// The claim is still the caller's: it can complete for real now.
		if err := s.Complete(ctx, c.Token, res); err != nil {
			t.Fatalf("complete after a rolled-back CompleteTx: %v", err)
		}
	})

	t.Run("StaleRollsBackBusinessWrites", func(t *testing.T) {
		ctx, pool, s, clock := setup(t)
		slow := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: time.Second}, idem.Acquired)
		clock.Advance(time.Second)
		fast := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.Acquired)

		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `INSERT INTO invoices VALUES ('inv-slow')`); err != nil {
			t.Fatal(err)
		}
		err = s.CompleteTx(ctx, tx, slow.Token, res)
		var se *idem.StaleClaimError
		if !errors.As(err, &se) || se.Current != fast.Token.Generation {
			t.Fatalf("CompleteTx with a stale token = %v, want stale with current %d", err, fast.Token.Generation)
		}
		// A careless caller commits anyway: PostgreSQL refuses.
		if err := tx.Commit(ctx); err == nil {
			t.Fatal("commit after a stale CompleteTx succeeded")
		}
		if n := invoices(t, ctx, pool); n != 0 {
			t.Errorf("%d invoices committed by the stale owner, want 0", n)
		}
		mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.InFlight)
		if err := s.Complete(ctx, fast.Token, res); err != nil {
			t.Fatalf("the new owner's complete: %v", err)
		}
	})
}

// TestConcurrentSweepersDeleteEachRowOnce runs three sweepers at once, in
// batches of 25, on an ordinary and on a hash-partitioned table: every
// batch stays within its bound (on a partitioned table the LIMIT bounds the
// batch across partitions), and every row is deleted once.
func TestConcurrentSweepersDeleteEachRowOnce(t *testing.T) {
	t.Parallel()
	for _, partitions := range []int{0, 8} {
		t.Run(fmt.Sprintf("partitions=%d", partitions), func(t *testing.T) {
			t.Parallel()
			testConcurrentSweepers(t, partitions)
		})
	}
}

func testConcurrentSweepers(t *testing.T, partitions int) {
	ctx := testCtx(t)
	clock := idemtest.NewClock()
	pool, schema := migratedWith(t, migrations.Options{Partitions: partitions})
	const batch = 25
	const abandoned, expired = 300, 300
	s := newStoreAt(t, pool, clock.Now, pgstore.Options{Retention: time.Minute})
	// Rows are made with one statement each (as claims would), in bulk.
	if _, err := pool.Exec(ctx, `
		INSERT INTO idem_keys (scope, key, generation, state, lease_end, created_at)
		SELECT 's'::bytea, 'id/a' || i, nextval('idem_keys_generation_seq'), 'claimed', $1, $1
		  FROM generate_series(1, $2) i`, clock.Now(), abandoned); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO idem_keys (scope, key, generation, state, result, created_at, completed_at, expires_at)
		SELECT 's'::bytea, 'id/e' || i, nextval('idem_keys_generation_seq'), 'completed', '{}', $1, $1, $1
		  FROM generate_series(1, $2) i`, clock.Now(), expired); err != nil {
		t.Fatal(err)
	}
	live := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("live"), Lease: time.Hour}, idem.Acquired)
	clock.Advance(time.Second)

	var total [3]idem.SweepStats
	var wg sync.WaitGroup
	for i := range 3 {
		sw := newStoreAt(t, secondPool(t, schema), clock.Now, pgstore.Options{Retention: time.Minute})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				st, err := sw.Sweep(ctx, batch)
				if err != nil {
					t.Errorf("sweeper %d: %v", i, err)
					return
				}
				if st.Abandoned+st.Expired > batch {
					t.Errorf("sweeper %d removed %+v in one batch of %d", i, st, batch)
				}
				total[i].Abandoned += st.Abandoned
				total[i].Expired += st.Expired
				if st == (idem.SweepStats{}) {
					return
				}
			}
		}()
	}
	wg.Wait()
	var sum idem.SweepStats
	for _, st := range total {
		sum.Abandoned += st.Abandoned
		sum.Expired += st.Expired
	}
	if sum != (idem.SweepStats{Abandoned: abandoned, Expired: expired}) {
		t.Errorf("sweepers removed %+v in all (%+v), want %d abandoned and %d expired", sum, total, abandoned, expired)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_keys`).Scan(&left); err != nil || left != 1 {
		t.Errorf("rows left = %d, %v; want the live claim only", left, err)
	}
	if err := s.Complete(ctx, live.Token, idem.Result{}); err != nil {
		t.Errorf("live claim after the sweep: %v", err)
	}
}

// TestSweeperSweepsUntilClose: the store's own sweeper removes an
// abandoned claim, and Close stops it (goleak in TestMain sees it gone).
func TestSweeperSweepsUntilClose(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clock := idemtest.NewClock()
	pool, _ := migrated(t)
	s := newStoreAt(t, pool, clock.Now, pgstore.Options{SweepInterval: 10 * time.Millisecond})
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: time.Second}, idem.Acquired)
	clock.Advance(time.Second)
	for {
		_, ok, err := s.Inspect(ctx, "s", key("a"))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the sweeper never swept the abandoned claim")
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.Close()
	s.Close() // idempotent
}

func TestWait(t *testing.T) {
	t.Parallel()
	// Each case has a holder on one pool and a waiter on another pool
	// (another instance). The waiter blocks only once it has seen the claim
	// live; the test then ends the claim in a way only one mechanism can
	// report within the test's one-minute bound.
	setup := func(t *testing.T, poll time.Duration) (context.Context, *pgstore.Store, *pgstore.Store, *pgxpool.Pool) {
		t.Helper()
		t.Parallel()
		ctx := testCtx(t)
		pool, schema := migrated(t)
		holder := newStore(t, pool, pgstore.Options{})
		// The waiter's connections are named after the schema, so that
		// the test can find its listener among other tests'.
		cfg := testdb.Config(t, schema)
		cfg.ConnConfig.RuntimeParams["application_name"] = "waiter-" + schema
		waiter := newStore(t, testdb.NewPool(t, cfg), pgstore.Options{PollInterval: poll})
		return ctx, holder, waiter, pool
	}
	// waitAsync starts Wait and returns its result channel once it blocks.
	waitAsync := func(t *testing.T, ctx context.Context, waiter *pgstore.Store) <-chan error {
		t.Helper()
		blocked := make(chan struct{}, 1)
		pgstore.SetWaitBlocked(waiter, func() { blocked <- struct{}{} })
		errc := make(chan error, 1)
		go func() { errc <- waiter.Wait(ctx, "s", key("a")) }()
		select {
		case <-blocked:
		case err := <-errc:
			t.Fatalf("Wait returned %v before blocking", err)
		}
		return errc
	}

	t.Run("WokenByNotifyFromAnotherPool", func(t *testing.T) {
		ctx, holder, waiter, _ := setup(t, time.Hour) // no polling
		c := mustClaim(t, ctx, holder, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: time.Hour}, idem.Acquired)
		errc := waitAsync(t, ctx, waiter)
		if err := holder.Complete(ctx, c.Token, idem.Result{Status: 200}); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("Wait = %v, want woken by the completion's NOTIFY", err)
		}
	})

	t.Run("WokenByRelease", func(t *testing.T) {
		ctx, holder, waiter, _ := setup(t, time.Hour)
		c := mustClaim(t, ctx, holder, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: time.Hour}, idem.Acquired)
		errc := waitAsync(t, ctx, waiter)
		if err := holder.Release(ctx, c.Token); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("Wait = %v, want woken by the release's NOTIFY", err)
		}
	})

	t.Run("PollingFallback", func(t *testing.T) {
		ctx, holder, waiter, pool := setup(t, 20*time.Millisecond)
		mustClaim(t, ctx, holder, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: time.Hour}, idem.Acquired)
		pgstore.SetWaitBlocked(waiter, nil)
		// The lease is cut short behind the store's back: no NOTIFY, so
		// only polling can notice.
		result := make(chan idem.Claim, 1)
		go func() {
			c, err := idem.ClaimWait(ctx, waiter, idem.ClaimRequest{Scope: "s", Key: key("a")}, time.Minute)
			if err != nil {
				t.Errorf("ClaimWait: %v", err)
			}
			result <- c
		}()
		if _, err := pool.Exec(ctx, `UPDATE idem_keys SET lease_end = now() - interval '1 second'`); err != nil {
			t.Fatal(err)
		}
		if c := <-result; c.Status != idem.Acquired || !c.Takeover {
			t.Fatalf("ClaimWait = %+v, want a takeover", c)
		}
	})

	t.Run("LeaseEndWakes", func(t *testing.T) {
		ctx, holder, waiter, _ := setup(t, time.Hour)
		// A short lease on the database clock: the waiter's timer is the
		// lease's remainder, not the hour-long poll interval.
		mustClaim(t, ctx, holder, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: 200 * time.Millisecond}, idem.Acquired)
		c, err := idem.ClaimWait(ctx, waiter, idem.ClaimRequest{Scope: "s", Key: key("a")}, time.Minute)
		if err != nil || c.Status != idem.Acquired || !c.Takeover {
			t.Fatalf("ClaimWait = %+v, %v; want a takeover once the lease ran out", c, err)
		}
	})

	t.Run("ListenerReconnects", func(t *testing.T) {
		ctx, holder, waiter, pool := setup(t, time.Hour)
		c := mustClaim(t, ctx, holder, idem.ClaimRequest{Scope: "s", Key: key("a"), Lease: time.Hour}, idem.Acquired)
		errc := waitAsync(t, ctx, waiter)
		// Kill the listener's backend: the waiter is woken (notifications
		// may have been lost), and the next wait works again.
		var channel string
		if err := pool.QueryRow(ctx, pgstore.ChannelSQL(waiter)).Scan(&channel); err != nil {
			t.Fatal(err)
		}
		var killed int
		if err := pool.QueryRow(ctx, `
			SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			 WHERE application_name = 'waiter-' || current_schema() AND query = 'LISTEN ' || $1`,
			channel).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if killed != 1 {
			t.Fatalf("killed %d listener backends, want 1", killed)
		}
		if err := <-errc; err != nil {
			t.Fatalf("Wait after the listener died = %v, want a wake-up", err)
		}
		errc = waitAsync(t, ctx, waiter)
		if err := holder.Complete(ctx, c.Token, idem.Result{Status: 200}); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("Wait after reconnect = %v, want woken by NOTIFY", err)
		}
	})
}
