package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

func wantUnavailable(t *testing.T, op string, err error) {
	t.Helper()
	var ue *idem.UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, idem.ErrUnavailable) || ue.Op != op {
		t.Errorf("%s: %v, want *idem.UnavailableError with Op %q", op, err, op)
	}
}

func TestUnreachableDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	closed, _ := migrated(t)
	closed.Close()
	cfg, err := pgxpool.ParseConfig("postgres://idem@127.0.0.1:1/idem?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	dead := testdb.NewPool(t, cfg)
	for name, pool := range map[string]*pgxpool.Pool{"closed pool": closed, "dead port": dead} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, pool, pgstore.Options{})
			tok := idem.Token{Scope: "s", Key: key("a"), Generation: 1}
			_, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("a")})
			wantUnavailable(t, "claim", err)
			wantUnavailable(t, "complete", s.Complete(ctx, tok, idem.Result{}))
			_, err = s.Renew(ctx, tok, 0)
			wantUnavailable(t, "renew", err)
			wantUnavailable(t, "release", s.Release(ctx, tok))
			_, err = s.Sweep(ctx, 0)
			wantUnavailable(t, "sweep", err)
			_, _, err = s.Inspect(ctx, "s", key("a"))
			wantUnavailable(t, "inspect", err)
			_, err = s.Stats(ctx)
			wantUnavailable(t, "stats", err)
		})
	}
}

// TestServerCrashAndRestart crashes a private PostgreSQL server under the
// store: operations fail as unavailable while it is down; after the restart,
// results and claims are still there, generations keep increasing, and the
// listener reconnects by itself.
func TestServerCrashAndRestart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv := testdb.StartServer(t)
	cfg, err := pgxpool.ParseConfig(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	pool := testdb.NewPool(t, cfg)
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool, pgstore.Options{PollInterval: time.Hour})
	res := idem.Result{Status: 201, Body: []byte("kept")}
	done := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("done")}, idem.Acquired)
	if err := s.Complete(ctx, done.Token, res); err != nil {
		t.Fatal(err)
	}
	live := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("live"), Lease: time.Hour}, idem.Acquired)
	// Start the listener before the crash.
	wctx, cancel := context.WithCancel(ctx)
	cancel()
	_ = s.Wait(wctx, "s", key("live"))

	srv.Stop("immediate")
	_, err = s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("x")})
	wantUnavailable(t, "claim", err)
	wantUnavailable(t, "complete", s.Complete(ctx, live.Token, res))
	srv.Start()

	// The pool drops its dead connections as it finds them: retry until the
	// store answers again.
	var c idem.Claim
	for {
		c, err = s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("done")})
		if err == nil {
			break
		}
		wantUnavailable(t, "claim", err)
		if ctx.Err() != nil {
			t.Fatal("store never recovered")
		}
	}
	if c.Status != idem.Completed || !c.Result.Equal(res) {
		t.Fatalf("after restart: %+v, want the recorded result", c)
	}
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("live")}, idem.InFlight)
	fresh := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("fresh")}, idem.Acquired)
	if fresh.Token.Generation <= live.Token.Generation {
		t.Errorf("generation after restart %d, want > %d", fresh.Token.Generation, live.Token.Generation)
	}

	// The waiter blocks only once the listener is back (Wait looks at the
	// key only then), and the completion's NOTIFY wakes it: the poll
	// interval is an hour.
	blocked := make(chan struct{}, 1)
	pgstore.SetWaitBlocked(s, func() { blocked <- struct{}{} })
	errc := make(chan error, 1)
	go func() {
		for {
			err := s.Wait(ctx, "s", key("live"))
			if err == nil || ctx.Err() != nil {
				errc <- err
				return
			}
		}
	}()
	<-blocked
	if err := s.Complete(ctx, live.Token, res); err != nil {
		t.Fatalf("complete after restart with a token from before: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Wait after restart: %v", err)
	}
}
