package idemtest_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestEvents: events observed from many goroutines are all recorded, and
// Count, Of and Kinds see the same ones.
func TestEvents(t *testing.T) {
	t.Parallel()
	var events idemtest.Events
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			kind := idem.EventClaimed
			if i%5 == 0 {
				kind = idem.EventReleased
			}
			events.Observe(idem.Event{Kind: kind})
		})
	}
	wg.Wait()
	if got := events.Count(idem.EventClaimed); got != 40 {
		t.Errorf("Count(claimed) = %d, want 40", got)
	}
	if got := len(events.Of(idem.EventReleased)); got != 10 {
		t.Errorf("Of(released) has %d events, want 10", got)
	}
	if got := events.Count(idem.EventCompleted); got != 0 {
		t.Errorf("Count(completed) = %d, want 0", got)
	}
	kinds := events.Kinds()
	if len(kinds) != 50 || len(events.All()) != 50 {
		t.Fatalf("Kinds has %d entries, All %d events; want 50", len(kinds), len(events.All()))
	}
	if n := len(slices.DeleteFunc(kinds, func(k string) bool { return k != idem.EventReleased.String() })); n != 10 {
		t.Errorf("Kinds names %d releases, want 10", n)
	}
}

// TestEventsWait: Wait returns once the events it waits for are recorded
// from another goroutine, not before, and returns the context's cause when
// they never come.
func TestEventsWait(t *testing.T) {
	t.Parallel()
	var events idemtest.Events
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for range 3 {
			events.ObserveHTTP(nil, idem.Event{Kind: idem.EventCompleted})
		}
	}()
	if err := events.Wait(t.Context(), idem.EventCompleted, 3); err != nil {
		t.Fatal(err)
	}
	if got := events.Count(idem.EventCompleted); got < 3 {
		t.Fatalf("Wait returned with %d completions recorded, want 3", got)
	}
	<-recorded
	if got := len(events.At(idem.EventCompleted)); got != 3 {
		t.Fatalf("At has %d times, want 3", got)
	}

	if err := events.WaitAny(t.Context(), idem.EventReleased, idem.EventCompleted); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancelCause(t.Context())
	never := errors.New("never")
	cancel(never)
	if err := events.Wait(ctx, idem.EventReleased, 1); !errors.Is(err, never) {
		t.Fatalf("Wait for an event that never comes = %v, want the context's cause", err)
	}
	if err := events.WaitAny(ctx, idem.EventReleased, idem.EventStale); !errors.Is(err, never) {
		t.Fatalf("WaitAny for events that never come = %v, want the context's cause", err)
	}
}
