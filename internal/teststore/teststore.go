// Package teststore holds stores for tests: stores that inject a store's
// faults around a real one, shared by the engine's tests and the adapter
// table in the integration module (integration/situations), which check
// the same faults from both sides; and [Migrated], the pgstore every test
// over PostgreSQL sets up the same way.
package teststore

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
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

// ClaimAnsweredLate is a store whose first Claim claims through the
// wrapped store and answers only After later, as a process that stalled
// between sending a claim and reading its answer: with After past the
// lease, the lease ran out before the work could start. Later claims
// answer at once.
type ClaimAnsweredLate struct {
	idem.Store
	After time.Duration
	late  atomic.Bool
}

// Claim claims through the wrapped store, and the first time sleeps After
// before answering.
func (s *ClaimAnsweredLate) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	c, err := s.Store.Claim(ctx, req)
	if s.late.CompareAndSwap(false, true) {
		time.Sleep(s.After)
	}
	return c, err
}

// LeaseOverBeforeTheWork runs test in a testing/synctest bubble, with a
// memstore whose first claim answers after its lease (opts.Lease, 1 s) ran
// out, and the engine options of that lease: the adapters' checks of
// engine.TestSynctestLeaseOverBeforeTheWork.
func LeaseOverBeforeTheWork(t *testing.T, test func(t *testing.T, store idem.Store, opts engine.Options)) {
	synctest.Test(t, func(t *testing.T) {
		store := &ClaimAnsweredLate{Store: memstore.New(memstore.Options{}), After: 1500 * time.Millisecond}
		test(t, store, engine.Options{Lease: time.Second})
	})
}

// Migrated is the setup of a test over PostgreSQL: it migrates the schema
// of pool (a pool of [testdb], on a schema of the test's own), runs each
// of ddl there (the tables of the test's side effects), and opens a
// pgstore.Store on pool with opts, closed when t ends.
func Migrated(t testing.TB, pool *pgxpool.Pool, opts pgstore.Options, ddl ...string) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	for _, q := range ddl {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	store, err := pgstore.New(pool, opts)
	if err != nil {
		t.Fatalf("pgstore.New: %v", err)
	}
	t.Cleanup(store.Close)
	return store
}

// Kit is a test's PostgreSQL set up as by [Migrated], on a fresh schema of
// its own; Ctx bounds the test's statements (a minute from the start).
type Kit struct {
	Ctx    context.Context
	Pool   *pgxpool.Pool
	Schema string
	Store  *pgstore.Store
}

// NewKit sets up a Kit: a pool on a fresh schema (testdb.Pool), migrated,
// with the tables of ddl, and a store on it with opts.
func NewKit(t testing.TB, opts pgstore.Options, ddl ...string) *Kit {
	t.Helper()
	pool, schema := testdb.Pool(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return &Kit{Ctx: ctx, Pool: pool, Schema: schema, Store: Migrated(t, pool, opts, ddl...)}
}

// Count returns how many rows table holds.
func (k *Kit) Count(t testing.TB, table string) int {
	t.Helper()
	var n int
	if err := k.Pool.QueryRow(k.Ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
