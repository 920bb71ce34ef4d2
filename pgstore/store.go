package pgstore

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgschema"
)

var _ idem.Store = (*Store)(nil)

// Store is an [idem.Store] in PostgreSQL. It is safe for concurrent use, and
// any number of Stores (in any number of processes) may share one table.
type Store struct {
	pool      *pgxpool.Pool
	obj       pgschema.Objects
	lease     time.Duration
	retention time.Duration // negative: forever
	poll      time.Duration
	log       *slog.Logger
	now       func() time.Time
	txOptions pgx.TxOptions

	sql         statements
	listener    *listener
	cache       *replayCache // nil: no replay cache
	stopSweeper func()       // stops the sweeper and waits for it; nil: none

	// utf8 is set once the database was seen to be UTF8; notUTF8 holds
	// the refusal once it was seen not to be (see checkEncoding).
	utf8    atomic.Bool
	notUTF8 atomic.Pointer[pgschema.EncodingError]

	// cacheInvalidated and cacheDropped, when set (tests only), are called
	// after the cache handled a notification or dropped everything.
	cacheInvalidated atomic.Pointer[func(payload string)]
	cacheDropped     atomic.Pointer[func()]

	// waitBlocked, when set (tests only), is called when Wait has seen a
	// live claim and is about to block on a notification.
	waitBlocked func()
	// waitPolled, when set (tests only), is called when Wait, not
	// listening, has seen a live claim and pauses before looking again.
	waitPolled func()
	// txEndWaits, when set (tests only), is called when a claim's Commit
	// or Rollback waits for a statement of the work in progress.
	txEndWaits func()
}

// New returns a store on pool. It validates opts but does not touch the
// database: the table must have been created with package migrations (with
// the same Table). Close the store when done with it, before closing the
// pool, to stop the listener goroutine Wait starts.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	return newStore(pool, opts, nil)
}

// newStore is New with the clock of every statement: nil (production)
// means the database's, statement_timestamp(), and the application's clock
// is never used for leases; tests set a fake one (export_test.go).
func newStore(pool *pgxpool.Pool, opts Options, now func() time.Time) (*Store, error) {
	if pool == nil {
		return nil, errors.New("pgstore: nil pool")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	obj, err := pgschema.ObjectsFor(opts.Table)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	opts = opts.withDefaults()
	s := &Store{
		pool:      pool,
		obj:       obj,
		lease:     opts.Lease,
		retention: opts.Retention,
		poll:      opts.PollInterval,
		log:       opts.Logger,
		now:       now,
		txOptions: opts.TxOptions,
	}
	if s.sql, err = buildStatements(obj); err != nil {
		return nil, err
	}
	lc := listenerConfig{pool: pool, sql: &s.sql, log: s.log, heartbeat: opts.Heartbeat, off: opts.NoListen}
	if opts.ListenConfig != nil {
		lc.direct = opts.ListenConfig.Copy()
	}
	if opts.ReplayCacheBytes > 0 {
		s.cache = newReplayCache(opts.ReplayCacheBytes)
		lc.notified, lc.listening = s.cacheNotified, s.cacheListening
	}
	s.listener = newListener(lc)
	if opts.SweepInterval > 0 {
		s.startSweeper(opts.SweepInterval)
	}
	return s, nil
}

// Close stops the store's sweeper and waits for it to return, and stops
// the listener goroutine Wait started, if any. It does not close the pool.
// Wait still works after Close, by polling only. Close is idempotent.
func (s *Store) Close() {
	if s.stopSweeper != nil {
		s.stopSweeper()
	}
	s.listener.close()
}

// nowArg is the now parameter of every statement: nil means the database
// clock.
func (s *Store) nowArg() *time.Time {
	if s.now == nil {
		return nil
	}
	now := s.now()
	return &now
}

func (s *Store) leaseOf(d time.Duration) time.Duration {
	if d <= 0 {
		return s.lease
	}
	return d
}

func (s *Store) retentionMicros() int64 {
	if s.retention < 0 {
		return -1
	}
	return s.retention.Microseconds()
}

// Retention is how long a result is replayed after completion:
// Options.Retention with its default applied, negative for a store that
// keeps results until they are forgotten.
func (s *Store) Retention() time.Duration { return s.retention }
