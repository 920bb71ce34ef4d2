package memstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Forget has pgstore's shape and rule, so that an operator tool can be
// written against either store: a live claim is refused unless forced.
func TestForget(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newAt(Options{}, func() time.Time { return now })
	key := func(k string) idem.Key {
		t.Helper()
		parsed, err := idem.ParseClientKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return parsed
	}
	claim := func(k string) idem.Claim {
		t.Helper()
		c, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key(k), Lease: time.Minute})
		if err != nil || c.Status != idem.Acquired {
			t.Fatalf("claim %s = %+v, %v", k, c, err)
		}
		return c
	}

	if ok, err := s.Forget(ctx, "s", key("absent"), false); ok || err != nil {
		t.Errorf("forget absent = %v, %v; want false, nil", ok, err)
	}
	live := claim("live")
	if ok, err := s.Forget(ctx, "s", key("live"), false); ok || !errors.Is(err, idem.ErrLiveClaim) {
		t.Errorf("forget live claim unforced = %v, %v; want ErrLiveClaim", ok, err)
	}
	if _, ok := s.Lookup("s", key("live")); !ok {
		t.Error("a refused forget removed the claim")
	}
	if ok, err := s.Forget(ctx, "s", key("live"), true); !ok || err != nil {
		t.Errorf("forget live claim forced = %v, %v; want true, nil", ok, err)
	}
	if err := s.Complete(ctx, live.Token, idem.Result{Status: 201}); !errors.Is(err, idem.ErrStaleClaim) {
		t.Errorf("complete after forget = %v; want a stale claim", err)
	}

	done := claim("done")
	if err := s.Complete(ctx, done.Token, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Forget(ctx, "s", key("done"), false); !ok || err != nil {
		t.Errorf("forget completed = %v, %v; want true, nil", ok, err)
	}
	claim("abandoned")
	now = now.Add(2 * time.Minute) // the lease ran out
	if ok, err := s.Forget(ctx, "s", key("abandoned"), false); !ok || err != nil {
		t.Errorf("forget abandoned claim = %v, %v; want true, nil", ok, err)
	}

	if _, err := s.Forget(ctx, "s", idem.Key{}, true); err == nil {
		t.Error("forget zero key succeeded")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Forget(cancelled, "s", key("any"), true); err == nil {
		t.Error("forget with a done ctx succeeded")
	}
}
