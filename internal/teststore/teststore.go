// Package teststore holds stores for tests that inject a store's faults
// around a real one. It is shared by the engine's tests and the adapter
// table in the integration module (integration/situations), which check
// the same faults from both sides.
package teststore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// CompleteFailsUntil is a store whose Complete fails as unavailable until
// the moment Up, as during a database failover: the connection is gone,
// the next one reaches the new primary. A zero Up fails nothing. Set Up
// before the Complete it should fail (the work that precedes it can).
type CompleteFailsUntil struct {
	idem.Store
	Up time.Time
	// Attempts counts the calls of Complete.
	Attempts atomic.Int64
}

// Complete fails with an [idem.UnavailableError] before Up, and completes
// through the wrapped store afterwards.
func (s *CompleteFailsUntil) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	s.Attempts.Add(1)
	if time.Now().Before(s.Up) {
		return &idem.UnavailableError{Op: "complete", Err: errors.New("connection refused")}
	}
	return s.Store.Complete(ctx, tok, res)
}
