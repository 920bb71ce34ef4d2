package pause_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/internal/pause"
)

func TestFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !pause.For(t.Context(), time.Second) || time.Since(start) != time.Second {
			t.Fatalf("For(1s) returned after %v", time.Since(start))
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		if pause.For(ctx, time.Hour) || time.Since(start) != time.Second {
			t.Fatalf("For(1h) under a 1s context returned true or after %v", time.Since(start))
		}
	})
}

// TestBackoff: retry n waits between half of and all of base doubled n
// times, never more than limit, and gives up when ctx ends.
func TestBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for retry, want := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond} {
			start := time.Now()
			if !pause.Backoff(t.Context(), retry, 10*time.Millisecond, 50*time.Millisecond) {
				t.Fatalf("retry %d: Backoff gave up", retry)
			}
			if waited := time.Since(start); waited < want/2 || waited > want {
				t.Errorf("retry %d waited %v, want [%v, %v]", retry, waited, want/2, want)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if pause.Backoff(ctx, 0, time.Second, time.Second) {
			t.Error("Backoff under an ended context reported a whole wait")
		}
	})
}
