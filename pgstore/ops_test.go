package pgstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

func TestInspectForgetStats(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clock := idemtest.NewClock()
	pool, _ := migrated(t)
	s := newStoreAt(t, pool, clock.Now, pgstore.Options{Retention: time.Hour})
	t0 := clock.Now()

	live := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("live"), Fingerprint: "fp", Owner: "host-1", Lease: time.Hour}, idem.Acquired)
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("abandoned"), Lease: time.Second}, idem.Acquired)
	done := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("done")}, idem.Acquired)
	res := idem.Result{Status: 201, Body: []byte("ok")}
	if err := s.Complete(ctx, done.Token, res); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)

	e, ok, err := s.Inspect(ctx, "s", key("live"))
	if err != nil || !ok {
		t.Fatalf("inspect live: %v, %v", ok, err)
	}
	want := idem.Entry{State: idem.StateClaimed, Generation: live.Token.Generation, Fingerprint: "fp", Owner: "host-1", CreatedAt: t0, LeaseEnd: t0.Add(time.Hour)}
	if e.State != want.State || e.Generation != want.Generation || e.Fingerprint != want.Fingerprint || e.Owner != want.Owner ||
		!e.CreatedAt.Equal(want.CreatedAt) || !e.LeaseEnd.Equal(want.LeaseEnd) || !e.ExpiresAt.IsZero() {
		t.Errorf("inspect live = %+v, want %+v", e, want)
	}
	e, ok, err = s.Inspect(ctx, "s", key("done"))
	if err != nil || !ok || e.State != idem.StateCompleted || !e.Result.Equal(res) ||
		!e.CompletedAt.Equal(t0) || !e.ExpiresAt.Equal(t0.Add(time.Hour)) || !e.LeaseEnd.IsZero() {
		t.Errorf("inspect done = %+v, %v, %v", e, ok, err)
	}
	if _, ok, err := s.Inspect(ctx, "s", key("absent")); ok || err != nil {
		t.Errorf("inspect absent = %v, %v", ok, err)
	}

	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Claimed != 1 || st.Abandoned != 1 || st.Completed != 1 || st.Expired != 0 ||
		!st.OldestClaim.Equal(t0) || !st.OldestAbandoned.Equal(t0.Add(time.Second)) || st.TableBytes <= 0 {
		t.Errorf("stats = %+v", st)
	}

	if ok, err := s.Forget(ctx, "s", key("live"), false); ok || !errors.Is(err, idem.ErrLiveClaim) {
		t.Errorf("forget live claim unforced = %v, %v; want ErrLiveClaim", ok, err)
	}
	for _, k := range []string{"abandoned", "done"} {
		if ok, err := s.Forget(ctx, "s", key(k), false); !ok || err != nil {
			t.Errorf("forget %s = %v, %v; want forgotten", k, ok, err)
		}
	}
	if ok, err := s.Forget(ctx, "s", key("live"), true); !ok || err != nil {
		t.Errorf("forget live claim forced = %v, %v", ok, err)
	}
	if ok, err := s.Forget(ctx, "s", key("live"), true); ok || err != nil {
		t.Errorf("forget absent = %v, %v; want false, nil", ok, err)
	}
	var se *idem.StaleClaimError
	if err := s.Complete(ctx, live.Token, res); !errors.As(err, &se) || se.Current != 0 {
		t.Errorf("complete after forget = %v, want stale with no current generation", err)
	}
	if st, err := s.Stats(ctx); err != nil || st.Claimed+st.Abandoned+st.Completed+st.Expired != 0 || !st.OldestClaim.IsZero() {
		t.Errorf("stats of an empty table = %+v, %v", st, err)
	}
}

func TestInvalidScope(t *testing.T) {
	t.Parallel()
	pool, _ := migrated(t)
	s := newStore(t, pool, pgstore.Options{})
	long := string(make([]byte, idem.MaxScopeLen+1))
	_, err := s.Claim(testCtx(t), idem.ClaimRequest{Scope: long, Key: key("a")})
	var ik *idem.InvalidKeyError
	if !errors.As(err, &ik) {
		t.Errorf("claim with a %d-byte scope: %v, want *idem.InvalidKeyError", len(long), err)
	}
}

// The payload a waiter listens for must be the one the SQL sends, for every
// scope (any bytes) and key.
func TestNotifyPayloadMatchesSQL(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := testdb.Pool(t)
	// The long scope does not fit NotifyPayload's stack buffer.
	for _, scope := range []string{"", "s", "\x00", "\xff\xfe", "日本", "a\x00b", strings.Repeat("long", 100)} {
		for _, k := range []idem.Key{key("a"), key("\x00/%"), idem.KeyForMethodCall("s", idem.IntRequestID(7), "tools/call", "\xff")} {
			var got string
			if err := pool.QueryRow(ctx, `SELECT `+pgstore.PayloadSQL+` FROM (SELECT $1::bytea AS scope, $2::text AS key) r`,
				[]byte(scope), k.String()).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if want := pgstore.NotifyPayload(scope, k); got != want {
				t.Errorf("payload of (%q, %q): SQL %s, Go %s", scope, k, got, want)
			}
		}
	}
}

func TestNegativeRetentionKeepsResultsForever(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clock := idemtest.NewClock()
	pool, _ := migrated(t)
	s := newStoreAt(t, pool, clock.Now, pgstore.Options{Retention: -1})
	c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.Acquired)
	if err := s.Complete(ctx, c.Token, idem.Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * 365 * 24 * time.Hour)
	if st, err := s.Sweep(ctx, 0); err != nil || st != (idem.SweepStats{}) {
		t.Errorf("sweep = %+v, %v; want nothing", st, err)
	}
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.Completed)
}

// ForgetGeneration deletes a key only while it holds the generation given
// (zero: any): a key claimed again since is left alone, and the error says
// which generation holds it.
func TestForgetGeneration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, _ := migrated(t)
	s := newStore(t, pool, pgstore.Options{})
	first, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("k"), Lease: time.Hour})
	if err != nil || first.Status != idem.Acquired {
		t.Fatalf("claim: %+v %v", first, err)
	}
	if err := s.Complete(ctx, first.Token, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Forget(ctx, "s", key("k"), true); !ok || err != nil {
		t.Fatalf("forget: %v %v", ok, err)
	}
	second, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("k"), Lease: time.Hour})
	if err != nil || second.Status != idem.Acquired || second.Token.Generation == first.Token.Generation {
		t.Fatalf("claim again: %+v %v", second, err)
	}
	var se *idem.StaleClaimError
	ok, err := s.ForgetGeneration(ctx, "s", key("k"), first.Token.Generation, true)
	if ok || !errors.As(err, &se) || !errors.Is(err, idem.ErrStaleClaim) || se.Current != second.Token.Generation {
		t.Fatalf("forget generation %d of a key at %d = %v, %v; want a stale claim error naming %d",
			first.Token.Generation, second.Token.Generation, ok, err, second.Token.Generation)
	}
	if _, present, _ := s.Inspect(ctx, "s", key("k")); !present {
		t.Fatal("the newer claim was deleted")
	}
	if ok, err := s.ForgetGeneration(ctx, "s", key("k"), second.Token.Generation, false); ok || !errors.Is(err, idem.ErrLiveClaim) {
		t.Fatalf("forget the live claim's generation unforced = %v, %v; want ErrLiveClaim", ok, err)
	}
	if ok, err := s.ForgetGeneration(ctx, "s", key("k"), second.Token.Generation, true); !ok || err != nil {
		t.Fatalf("forget the key's own generation = %v, %v", ok, err)
	}
	if ok, err := s.ForgetGeneration(ctx, "s", key("k"), second.Token.Generation, true); ok || err != nil {
		t.Fatalf("forget an absent key = %v, %v; want false, nil", ok, err)
	}
	if _, err := s.ForgetGeneration(ctx, "s", key("k"), -1, true); err == nil {
		t.Fatal("a negative generation was accepted")
	}
}
