// Package memstore is the in-memory [idem.Store]: the [idem.StateMachine] behind
// one lock, with leases on an injectable clock.
//
// It is the embedded default when no database is configured, and it is fully
// correct within one process: claims are atomic, generations are never
// reused, stale tokens change nothing. What it cannot do is survive a restart
// or coordinate several processes; for that use pgstore.
//
// Memory is bounded by [Options.Capacity] (entries) and [Options.MaxBytes]
// (bytes). A recorded result is never evicted while retained: a retry of an
// evicted key would run its side effect again. When a new key would exceed a
// bound, results past retention and claims whose lease ran out are reclaimed
// first; if that frees no room, the claim fails with [idem.ErrCapacity]
// (the middleware answers 503 with Retry-After, mcphttp a JSON-RPC error)
// until results expire or claims end. Size the bounds for your request rate
// times [Options.Retention].
package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/clockreg"
)

var _ idem.Store = (*Store)(nil)

// Defaults of [Options].
const (
	// DefaultCapacity is the number of keys held when Options.Capacity is
	// zero.
	DefaultCapacity = 100_000
	// DefaultMaxBytes is the bytes held when Options.MaxBytes is zero:
	// 256 MiB.
	DefaultMaxBytes = 256 << 20
	// DefaultRetention is how long a result is replayed when
	// Options.Retention is zero.
	DefaultRetention = 24 * time.Hour
	// DefaultPollInterval is the longest [Store.Wait] sleeps when
	// Options.PollInterval is zero.
	DefaultPollInterval = 100 * time.Millisecond
)

// Options configures a [Store]. The zero value is ready to use, and every
// value is valid (negative bounds mean none), so [New] returns no error,
// unlike pgstore.New, whose options can name a table that does not parse.
type Options struct {
	// Capacity bounds the number of keys held. Zero means
	// [DefaultCapacity]; negative means no bound on the count.
	Capacity int
	// MaxBytes bounds the bytes held, as [idem.StateMachine.Bytes] counts them:
	// keys, scopes, fingerprints and recorded results. It is checked when a
	// new key is claimed, so completions admitted before the store filled
	// may exceed it by their results. Zero means [DefaultMaxBytes];
	// negative means no bound on bytes.
	MaxBytes int64
	// Retention is how long a result is replayed after completion. Zero
	// means [DefaultRetention]; negative means forever (a full store then refuses
	// new keys for good: keep a bound only with a finite retention).
	Retention time.Duration
	// Lease is the lease of a claim that asks for none. Zero means
	// [idem.DefaultLease].
	Lease time.Duration
	// PollInterval bounds how long [Store.Wait] sleeps before returning
	// for the caller to look again, so a waiter notices a lease running out
	// on any clock. Zero or negative means [DefaultPollInterval].
	PollInterval time.Duration
}

// Store is an in-memory [idem.Store]. It is safe for concurrent use.
type Store struct {
	now       func() time.Time
	poll      time.Duration
	retention time.Duration // zero: until forgotten

	mu    sync.Mutex
	table *idem.StateMachine
	// waiters holds the keys someone waits on. An entry lives exactly as
	// long as it has waiters: its last waiter deletes it on leaving, so a
	// claim that ends without a wake (its lease runs out and it is taken
	// over, swept or reclaimed) leaves nothing behind.
	waiters map[waitKey]*waiters
}

// waiters are the Wait calls on one key: ch is closed when the key's claim
// completes or is released.
type waiters struct {
	ch chan struct{}
	n  int
}

type waitKey struct {
	scope string
	key   idem.Key
}

// New returns an empty store.
func New(opts Options) *Store { return newAt(opts, time.Now) }

// newAt is New with now as the store's clock: for tests, through package
// internal/memclock.
func newAt(opts Options, now func() time.Time) *Store {
	opts = opts.withDefaults()
	return &Store{
		now:       now,
		poll:      opts.PollInterval,
		retention: opts.Retention,
		table: idem.NewStateMachine(idem.StateMachineConfig{
			Capacity: opts.Capacity, MaxBytes: opts.MaxBytes,
			Retention: opts.Retention, DefaultLease: opts.Lease,
		}),
		waiters: make(map[waitKey]*waiters),
	}
}

// withDefaults returns o with zero fields set to their defaults, and
// negative bounds and retention to the table's "none" (zero).
func (o Options) withDefaults() Options {
	orNone := func(v, def int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	o.Capacity = int(orNone(int64(o.Capacity), DefaultCapacity))
	o.MaxBytes = orNone(o.MaxBytes, DefaultMaxBytes)
	o.Retention = time.Duration(orNone(int64(o.Retention), int64(DefaultRetention)))
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	return o
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
	w, ok := s.waiters[wk]
	if !ok {
		w = &waiters{ch: make(chan struct{})}
		s.waiters[wk] = w
	}
	w.n++
	s.mu.Unlock()
	defer s.leave(wk, w)

	timer := time.NewTimer(min(e.LeaseEnd.Sub(now), s.poll))
	defer timer.Stop()
	select {
	case <-w.ch:
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leave ends one Wait on wk; the last waiter removes the entry, unless a
// wake already did.
func (s *Store) leave(wk waitKey, w *waiters) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.n--
	if w.n == 0 && s.waiters[wk] == w {
		delete(s.waiters, wk)
	}
}

// wake releases the waiters of a key. s.mu must be held.
func (s *Store) wake(scope string, key idem.Key) {
	wk := waitKey{scope, key}
	if w, ok := s.waiters[wk]; ok {
		close(w.ch)
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

// Inspect returns the entry of (scope, key) as stored, whatever its state,
// for operators: the same shape as pgstore's Inspect, so that an operator
// tool can be written against either. It fails only for an invalid key or
// a done ctx.
func (s *Store) Inspect(ctx context.Context, scope string, key idem.Key) (idem.Entry, bool, error) {
	if err := ctx.Err(); err != nil {
		return idem.Entry{}, false, err
	}
	if err := (idem.ClaimRequest{Scope: scope, Key: key}).Validate(); err != nil {
		return idem.Entry{}, false, err
	}
	e, ok := s.Lookup(scope, key)
	return e, ok, nil
}

// Lookup returns the entry for (scope, key), for tests; [Store.Inspect] is
// the operator's form.
func (s *Store) Lookup(scope string, key idem.Key) (idem.Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.Lookup(scope, key)
}

// Forget removes (scope, key), as an operator's forget does, and reports
// whether it was present: the same shape and rule as pgstore's Forget, so
// that an operator tool can be written against either store. A live claim
// (lease not run out) is refused with [idem.ErrLiveClaim] unless force is
// set: its holder is presumably still executing, and forgetting it would let
// a retry run the side effect a second time. The holder's token becomes
// stale and waiters wake. It fails otherwise only for an invalid key or a
// done ctx.
func (s *Store) Forget(ctx context.Context, scope string, key idem.Key, force bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := (idem.ClaimRequest{Scope: scope, Key: key}).Validate(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.table.Lookup(scope, key)
	if !ok {
		return false, nil
	}
	if !force && e.State == idem.StateClaimed && e.LeaseEnd.After(s.now()) {
		return false, idem.ErrLiveClaim
	}
	s.wake(scope, key)
	return s.table.Forget(scope, key), nil
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.Len()
}

// Bytes returns the bytes held, as Options.MaxBytes counts them.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.Bytes()
}

// Retention is how long a result is replayed after completion:
// Options.Retention with its default applied, negative for a store that
// keeps results until they are forgotten.
func (s *Store) Retention() time.Duration {
	if s.retention == 0 {
		return -1
	}
	return s.retention
}

func init() { clockreg.NewMemstore = newAt }
