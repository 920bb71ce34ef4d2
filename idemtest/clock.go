package idemtest

import (
	"sync"
	"time"
)

// Clock is a fake clock for stores under test: it moves only when Advance is
// called. Its times are whole microseconds, the resolution of PostgreSQL's
// timestamptz, so a durable store and the model agree to the instant.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock set to a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time. It is the func() time.Time stores take.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, truncated to microseconds.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d.Truncate(time.Microsecond))
}
