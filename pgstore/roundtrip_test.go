package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

// TestRoundTrips counts the statements each operation sends, and its round
// trips, on a warm connection (pgx prepares and caches a statement on its
// first use).
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, schema := migrated(t)
	cfg := testdb.Config(t, schema)
	cfg.MaxConns = 1 // one connection, so the warm-up prepares what the test uses
	tr := &tripCounter{}
	cfg.ConnConfig.Tracer = tr
	clock := idemtest.NewClock()
	s := newStoreAt(t, testdb.NewPool(t, cfg), clock.Now, pgstore.Options{})

	lifecycle := func(k string) (idem.Token, idem.Result) {
		c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key(k), Fingerprint: "fp"}, idem.Acquired)
		if _, err := s.Renew(ctx, c.Token, 0); err != nil {
			t.Fatal(err)
		}
		res := idem.Result{Status: 201, Body: []byte(k)}
		if err := s.Complete(ctx, c.Token, res); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key(k), Fingerprint: "fp"}, idem.Completed)
		r := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key(k + "-r")}, idem.Acquired)
		if err := s.Release(ctx, r.Token); err != nil {
			t.Fatal(err)
		}
		return c.Token, res
	}
	lifecycle("warm-up")

	for _, tc := range []struct {
		name string
		op   func()
	}{
		{"claim", func() {
			mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp"}, idem.Acquired)
		}},
		{"in flight", func() {
			mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp"}, idem.InFlight)
		}},
		{"renew", func() {
			tok := idem.Token{Scope: "s", Key: key("a"), Generation: mustInspect(t, ctx, s, "a").Generation}
			tr.reset()
			if _, err := s.Renew(ctx, tok, time.Minute); err != nil {
				t.Fatal(err)
			}
		}},
		{"complete", func() {
			tok := idem.Token{Scope: "s", Key: key("a"), Generation: mustInspect(t, ctx, s, "a").Generation}
			tr.reset()
			if err := s.Complete(ctx, tok, idem.Result{Status: 200, Body: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}},
		{"complete a large result", func() {
			// From 64 KiB on, Complete encodes its parameters itself;
			// still one statement, seen by the connection's tracer.
			c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("large")}, idem.Acquired)
			tr.reset()
			if err := s.Complete(ctx, c.Token, idem.Result{Status: 200, Body: make([]byte, 1<<20)}); err != nil {
				t.Fatal(err)
			}
		}},
		{"replay", func() {
			mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp"}, idem.Completed)
		}},
		{"release", func() {
			c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("b")}, idem.Acquired)
			tr.reset()
			if err := s.Release(ctx, c.Token); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		tr.reset()
		tc.op()
		if q, p := tr.statements.Load(), tr.prepares.Load(); q != 1 || p != 0 {
			t.Errorf("%s: %d statements and %d prepares, want 1 statement", tc.name, q, p)
		}
	}

	// Taking over a key whose lease ran out is the one claim that sends
	// two round trips: the claim finds the expired row, then
	// sql/takeover.sql, after its bounds (sql/claim_limits.sql), takes
	// it. The first takeover warms the connection up (pgx prepares the
	// statements on their first use).
	lost := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("t"), Lease: time.Second}, idem.Acquired)
	for _, counted := range []bool{false, true} {
		clock.Advance(2 * time.Second)
		tr.reset()
		if c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("t"), Lease: time.Second}, idem.Acquired); !c.Takeover {
			t.Error("takeover: Takeover false")
		}
		if n, q, p := tr.trips.Load(), tr.statements.Load(), tr.prepares.Load(); counted && (n != 2 || q != 3 || p != 0) {
			t.Errorf("takeover: %d round trips, %d statements and %d prepares, want 2 round trips and 3 statements", n, q, p)
		}
	}

	// So is a completion whose generation no longer holds the key: the
	// completion matches nothing, and sql/stale.sql raises the error.
	for _, counted := range []bool{false, true} {
		tr.reset()
		var se *idem.StaleClaimError
		if err := s.Complete(ctx, lost.Token, idem.Result{Status: 200}); !errors.As(err, &se) {
			t.Fatalf("stale complete: %v, want a stale-claim error", err)
		}
		if q, p := tr.statements.Load(), tr.prepares.Load(); counted && (q != 2 || p != 0) {
			t.Errorf("stale complete: %d statements and %d prepares, want 2 statements", q, p)
		}
	}
}

func mustInspect(t *testing.T, ctx context.Context, s *pgstore.Store, k string) idem.Entry {
	t.Helper()
	e, ok, err := s.Inspect(ctx, "s", key(k))
	if err != nil || !ok {
		t.Fatalf("inspect %q: %v, %v", k, ok, err)
	}
	return e
}

// TestClaimRaceTakesASecondRoundTrip forces the one case the claim statement
// cannot decide: the conflicting row is inserted by a transaction that
// commits after the statement's snapshot was taken. The claim (one with a
// Wait, which waits in PostgreSQL) must wait for it, look again, and
// report it in flight.
func TestClaimRaceTakesASecondRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, schema := migrated(t)
	cfg := testdb.Config(t, schema)
	cfg.ConnConfig.RuntimeParams["application_name"] = "racer-" + schema
	tr := &tripCounter{}
	cfg.ConnConfig.Tracer = tr
	racer := newStore(t, testdb.NewPool(t, cfg), pgstore.Options{})
	// A store's first claim also asks for the database's encoding.
	mustClaim(t, ctx, racer, idem.ClaimRequest{Scope: "s", Key: key("warm-up")}, idem.Acquired)
	tr.reset()

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The holder's claim, inside a transaction not yet committed.
	if _, err := tx.Exec(ctx, `
		INSERT INTO idem_keys (scope, key, generation, state, lease_end, created_at)
		VALUES ('s'::bytea, $1, nextval('idem_keys_generation_seq'), 'claimed', now() + interval '1 hour', now())`,
		key("a").String()); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		c   idem.Claim
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		c, err := racer.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("a"), Wait: 30 * time.Second})
		done <- outcome{c, err}
	}()
	// Wait until the racer's statement blocks on the uncommitted row.
	for {
		var blocked bool
		if err := pool.QueryRow(ctx, `
			SELECT EXISTS (SELECT FROM pg_stat_activity
			 WHERE application_name = 'racer-' || current_schema() AND wait_event_type = 'Lock')`).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		if blocked {
			break
		}
		select {
		case o := <-done:
			t.Fatalf("claim returned %+v, %v without waiting for the uncommitted row", o.c, o.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || o.c.Status != idem.InFlight {
		t.Fatalf("racing claim = %+v, %v; want InFlight", o.c, o.err)
	}
	if n := tr.trips.Load(); n != 2 {
		t.Errorf("racing claim took %d round trips, want 2 (the snapshot missed the row)", n)
	}
}

// TestDuplicatesWriteNothing checks that a claim of a key that has a row,
// a duplicate in flight or a replay the cache does not hold, leaves the
// row as it was: no new version, no lock (xmax stays 0).
func TestDuplicatesWriteNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := migrated(t)
	s := newStore(t, pool, pgstore.Options{})
	version := func() string {
		t.Helper()
		var v string
		if err := pool.QueryRow(ctx, `SELECT ctid::text || ' ' || xmin::text || ' ' || xmax::text FROM idem_keys WHERE key = $1`, key("w").String()).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	req := idem.ClaimRequest{Scope: "s", Key: key("w"), Fingerprint: "fp"}
	c := mustClaim(t, ctx, s, req, idem.Acquired)
	for _, want := range []idem.ClaimStatus{idem.InFlight, idem.Completed} {
		if want == idem.Completed {
			if err := s.Complete(ctx, c.Token, idem.Result{Status: 201}); err != nil {
				t.Fatal(err)
			}
		}
		before := version()
		mustClaim(t, ctx, s, req, want)
		if after := version(); after != before || !strings.HasSuffix(after, " 0") {
			t.Errorf("%v: the row went from (ctid xmin xmax) %s to %s, want it untouched", want, before, after)
		}
	}
}
