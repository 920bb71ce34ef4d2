// Package memstore is the in-memory [idem.Store]: the [idem.Table] behind
// one lock, with leases on an injectable clock.
//
// It is the embedded default when no database is configured, and it is fully
// correct within one process: claims are atomic, generations are never
// reused, stale tokens change nothing. What it cannot do is survive a restart
// or coordinate several processes; for that use pgstore.
//
// Memory is bounded by [Options.Capacity]: when full, the oldest result is
// evicted first (a retry of an evicted key runs again), and if every entry is
// a live claim, claiming fails with [idem.ErrCapacity].
package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

var _ idem.Store = (*Store)(nil)

// Options configures a [Store]. The zero value is ready to use.
type Options struct {
	// Capacity bounds the number of keys held. Zero means 100,000;
	// negative means unbounded.
	Capacity int
	// Retention is how long a result is replayed after completion. Zero
	// means 24 hours; negative means forever (until evicted).
	Retention time.Duration
	// Lease is the lease of a claim that asks for none. Zero means
	// [idem.DefaultLease].
	Lease time.Duration
	// Now is the clock. Nil means time.Now. Tests inject a fake clock.
	Now func() time.Time
	// PollInterval bounds how long [Store.Wait] sleeps before returning
	// for the caller to look again, so a waiter notices a lease running out
	// on any clock. Zero means 100ms.
	PollInterval time.Duration
}

// Store is an in-memory [idem.Store]. It is safe for concurrent use.
type Store struct {
	now  func() time.Time
	poll time.Duration

	mu      sync.Mutex
	table   *idem.Table
	waiters map[waitKey]chan struct{} // closed when the key's claim ends
}

type waitKey struct {
	scope string
	key   idem.Key
}

// New returns an empty store.
func New(opts Options) *Store {
	switch {
	case opts.Capacity == 0:
		opts.Capacity = 100_000
	case opts.Capacity < 0:
		opts.Capacity = 0
	}
	switch {
	case opts.Retention == 0:
		opts.Retention = 24 * time.Hour
	case opts.Retention < 0:
		opts.Retention = 0
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 100 * time.Millisecond
	}
	return &Store{
		now:     opts.Now,
		poll:    opts.PollInterval,
		table:   idem.NewTable(idem.TableConfig{Capacity: opts.Capacity, Retention: opts.Retention, DefaultLease: opts.Lease}),
		waiters: make(map[waitKey]chan struct{}),
	}
}

// Claim implements [idem.Store].
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.Claim(req, s.now())
}

// Complete implements [idem.Store].
func (s *Store) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.table.Complete(tok, res, s.now()); err != nil {
		return err
	}
	s.wake(tok.Scope, tok.Key)
	return nil
}

// Renew implements [idem.Store].
func (s *Store) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.Renew(tok, lease, s.now())
}

// Release implements [idem.Store].
func (s *Store) Release(ctx context.Context, tok idem.Token) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.table.Release(tok); err != nil {
		return err
	}
	s.wake(tok.Scope, tok.Key)
	return nil
}

// Wait implements [idem.Store]. It returns when the key's claim completes or
// is released, when its lease runs out, or after the poll interval.
func (s *Store) Wait(ctx context.Context, scope string, key idem.Key) error {
	s.mu.Lock()
	e, ok := s.table.Lookup(scope, key)
	now := s.now()
	if !ok || e.State != idem.StateClaimed || !now.Before(e.LeaseEnd) {
		s.mu.Unlock()
		return ctx.Err()
	}
	wk := waitKey{scope, key}
	ch, ok := s.waiters[wk]
	if !ok {
		ch = make(chan struct{})
		s.waiters[wk] = ch
	}
	s.mu.Unlock()

	timer := time.NewTimer(min(e.LeaseEnd.Sub(now), s.poll))
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wake releases the waiters of a key. s.mu must be held.
func (s *Store) wake(scope string, key idem.Key) {
	wk := waitKey{scope, key}
	if ch, ok := s.waiters[wk]; ok {
		close(ch)
		delete(s.waiters, wk)
	}
}

// Sweep implements [idem.Store].
func (s *Store) Sweep(ctx context.Context, limit int) (idem.SweepStats, error) {
	if err := ctx.Err(); err != nil {
		return idem.SweepStats{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.Sweep(s.now(), limit), nil
}

// Run sweeps every interval until ctx is done, then returns ctx's error.
// Memory is bounded by the capacity without it; Run frees it sooner.
func (s *Store) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if _, err := s.Sweep(ctx, 0); err != nil {
				return err
			}
		}
	}
}

// Lookup returns the entry for (scope, key), for operators and tests.
func (s *Store) Lookup(scope string, key idem.Key) (idem.Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.Lookup(scope, key)
}

// Forget removes (scope, key) whatever its state and reports whether it was
// present. A live claim's token becomes stale.
func (s *Store) Forget(scope string, key idem.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake(scope, key)
	return s.table.Forget(scope, key)
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.Len()
}
