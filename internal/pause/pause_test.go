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
