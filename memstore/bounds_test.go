package memstore

import (
	"context"
	"errors"
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
			if c, err := s.Claim(context.Background(), idem.ClaimRequest{Scope: "s", Key: k}); err != nil || !c.Takeover {
				t.Fatalf("takeover: %+v %v", c, err)
			}
		},
		"sweep": func(t *testing.T, s *Store, clock *idemtest.Clock, k idem.Key) {
			clock.Advance(2 * time.Second)
			if st, err := s.Sweep(context.Background(), 0); err != nil || st.Abandoned != 1 {
				t.Fatalf("sweep: %+v %v", st, err)
			}
		},
		"wait ends": func(*testing.T, *Store, *idemtest.Clock, idem.Key) {},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := idemtest.NewClock()
			s := New(Options{Now: clock.Now, PollInterval: 5 * time.Millisecond})
			k, _ := idem.ParseKey("k")
			if _, err := s.Claim(context.Background(), idem.ClaimRequest{Scope: "s", Key: k, Lease: time.Second}); err != nil {
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

func TestRunRejectsNonPositiveInterval(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	for _, d := range []time.Duration{0, -time.Second} {
		err := s.Run(context.Background(), d)
		if err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("Run(ctx, %v) = %v, want an error", d, err)
		}
	}
}
