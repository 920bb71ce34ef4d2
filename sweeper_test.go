package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/memclock"
	"github.com/idemkit/idem/memstore"
)

// abandon leaves n claims in s whose lease has run out by clock.
func abandon(t *testing.T, s idem.Store, clock *idemtest.Clock, n int) {
	t.Helper()
	for i := range n {
		k, err := idem.ParseClientKey(string(rune('a' + i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(t.Context(), idem.ClaimRequest{Scope: "s", Key: k, Lease: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Second)
}

// countingStore counts Sweep calls and fails the first failFirst of them.
type countingStore struct {
	idem.Store
	mu        sync.Mutex
	calls     int
	failFirst int
}

func (c *countingStore) Sweep(ctx context.Context, limit int) (idem.SweepStats, error) {
	c.mu.Lock()
	c.calls++
	fail := c.calls <= c.failFirst
	c.mu.Unlock()
	if fail {
		return idem.SweepStats{}, errors.New("store down")
	}
	return c.Store.Sweep(ctx, limit)
}

func TestSweeperSweepOnceBatchesUntilShort(t *testing.T) {
	t.Parallel()
	clock := idemtest.NewClock()
	s := &countingStore{Store: memclock.New(memstore.Options{}, clock.Now)}
	abandon(t, s, clock, 5)
	var reported idem.SweepStats
	sw := idem.Sweeper{Store: s, Batch: 2, OnSweep: func(_ context.Context, st idem.SweepStats) { reported = st }}
	st, err := sw.SweepOnce(t.Context())
	if err != nil || st != (idem.SweepStats{Abandoned: 5}) {
		t.Fatalf("SweepOnce = %+v, %v; want 5 abandoned", st, err)
	}
	if s.calls != 3 {
		t.Errorf("Sweep called %d times with batch 2 for 5 entries, want 3 (2, 2, then a short 1)", s.calls)
	}
	if reported != st {
		t.Errorf("OnSweep got %+v, want the round's total %+v", reported, st)
	}
}

func TestSweeperRunSweepsAtOnceRetriesAndStops(t *testing.T) {
	t.Parallel()
	clock := idemtest.NewClock()
	s := &countingStore{Store: memclock.New(memstore.Options{}, clock.Now), failFirst: 1}
	abandon(t, s, clock, 1)
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&syncWriter{w: &logs, mu: &mu}, nil))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- idem.Sweeper{Store: s, Interval: 10 * time.Millisecond, Logger: logger}.Run(ctx) }()
	deadline := time.After(10 * time.Second)
	for {
		if s.Store.(*memstore.Store).Len() == 0 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("Run never swept the abandoned claim after its first round failed")
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after ctx was cancelled, want nil", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"level=WARN msg=\"sweep failed", "store down", "msg=swept abandoned=1"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

func TestSweeperRejectsInvalidFields(t *testing.T) {
	t.Parallel()
	s := memstore.New(memstore.Options{})
	for _, tc := range []struct {
		sw    idem.Sweeper
		field string
	}{
		{idem.Sweeper{}, "Sweeper.Store"},
		{idem.Sweeper{Store: s, Interval: -time.Second}, "Sweeper.Interval"},
		{idem.Sweeper{Store: s, Batch: -1}, "Sweeper.Batch"},
	} {
		// A cancelled ctx makes a valid Sweeper return nil at once, so an
		// error here can only be the validation's.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := tc.sw.Run(ctx); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Run(%+v) = %v, want an error naming %s", tc.sw, err, tc.field)
		}
		if _, err := tc.sw.SweepOnce(ctx); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("SweepOnce(%+v) = %v, want an error naming %s", tc.sw, err, tc.field)
		}
	}
}

type syncWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
