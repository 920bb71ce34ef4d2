// Package pause waits between the attempts of a store call that is tried
// again (pgstore's serialization failures, the engine's completions).
package pause

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff waits before retry number retry (0 for the first): a random time
// in [d/2, d), where d is base doubled retry times, at most limit, so that
// callers that failed together do not retry in step. It reports false if
// ctx ends first.
func Backoff(ctx context.Context, retry int, base, limit time.Duration) bool {
	d := min(base<<min(retry, 16), limit)
	return For(ctx, d/2+rand.N(d/2+1))
}

// For waits d, or until ctx ends, and reports whether it waited all of d.
func For(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
