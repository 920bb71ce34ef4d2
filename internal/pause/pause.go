// Package pause waits between the attempts of a store call that is tried
// again (pgstore's serialization failures, the engine's completions).
package pause

import (
	"context"
	"time"
)

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
