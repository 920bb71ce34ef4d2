package memstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

func waiterCount(s *Store) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

// A waiter's channel is dropped when its last waiter leaves, however the
// claim ended: by a lease that ran out and a takeover, or by a sweep, as
// well as by a completion or a release.
func TestWaitersDoNotLeak(t *testing.T) {
	t.Parallel()
	for name, end := range map[string]func(t *testing.T, s *Store, clock *idemtest.Clock, k idem.Key){
		"takeover": func(t *testing.T, s *Store, clock *idemtest.Clock, k idem.Key) {
			clock.Advance(2 * time.Second)
			if c, err := s.Claim(t.Context(), idem.ClaimRequest{Scope: "s", Key: k}); err != nil || !c.Takeover {
				t.Fatalf("takeover: %+v %v", c, err)
			}
		},
		"sweep": func(t *testing.T, s *Store, clock *idemtest.Clock, k idem.Key) {
			clock.Advance(2 * time.Second)
			if st, err := s.Sweep(t.Context(), 0); err != nil || st.Abandoned != 1 {
				t.Fatalf("sweep: %+v %v", st, err)
			}
		},
		"wait ends": func(*testing.T, *Store, *idemtest.Clock, idem.Key) {},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := idemtest.NewClock()
			s := newAt(Options{PollInterval: 5 * time.Millisecond}, clock.Now)
			k, _ := idem.ParseClientKey("k")
			if _, err := s.Claim(t.Context(), idem.ClaimRequest{Scope: "s", Key: k, Lease: time.Second}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() { _ = s.Wait(context.Background(), "s", k) })
			}
			wg.Wait() // each Wait returns after the poll interval
			end(t, s, clock, k)
			if n := waiterCount(s); n != 0 {
				t.Errorf("%d waiter channels left after every waiter returned", n)
			}
		})
	}
}

// TestSweeperInterval: over a memstore, a negative interval is an error,
// returned at once; zero means idem.DefaultSweepInterval (it once made
// time.NewTicker panic), and Run returns nil when ctx is cancelled.
func TestSweeperInterval(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	if err := (idem.Sweeper{Store: s, Interval: -time.Second}).Run(t.Context()); err == nil {
		t.Errorf("Run with Interval -1s = nil, want an error")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- idem.Sweeper{Store: s}.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run with Interval 0 = %v after cancel, want nil", err)
	}
}

// TestInspect: Inspect reports what Lookup does, with pgstore's shape, and
// refuses an invalid key and a done ctx.
func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := New(Options{})
	k, err := idem.ParseClientKey("k")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Inspect(ctx, "s", k); ok || err != nil {
		t.Fatalf("Inspect(absent) = %v, %v; want absent", ok, err)
	}
	if _, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: k}); err != nil {
		t.Fatal(err)
	}
	e, ok, err := s.Inspect(ctx, "s", k)
	if !ok || err != nil || e.State != idem.StateClaimed || e.Generation == 0 {
		t.Fatalf("Inspect(claimed) = %+v, %v, %v; want a claimed entry", e, ok, err)
	}
	if _, _, err := s.Inspect(ctx, "s", idem.Key{}); err == nil {
		t.Error("Inspect(zero key) succeeded")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.Inspect(done, "s", k); err == nil {
		t.Error("Inspect(done ctx) succeeded")
	}
}
