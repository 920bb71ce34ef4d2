package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }

// migrated returns a pool on a fresh, migrated schema, and the schema.
func migrated(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	return migratedWith(t, migrations.Options{})
}

// migratedWith is migrated with the migrations' options.
func migratedWith(t testing.TB, opts migrations.Options) (*pgxpool.Pool, string) {
	t.Helper()
	pool, schema := testdb.Pool(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	session := sessionPool(t, pool, schema)
	if err := migrations.Up(ctx, session, opts); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	if session != pool {
		session.Close() // early: the server's connections are shared
	}
	return pool, schema
}

// sessionPool returns pool, or, when the tests run through a
// transaction-mode pooler, a direct pool on schema: migrations need a
// session (goose holds an advisory lock across statements).
func sessionPool(t testing.TB, pool *pgxpool.Pool, schema string) *pgxpool.Pool {
	t.Helper()
	if testdb.PoolerURL() == "" {
		return pool
	}
	return testdb.NewPool(t, testdb.DirectConfig(t, schema))
}

// newStore opens a store on pool, closed when t ends. When the tests run
// through a transaction-mode pooler and pool goes through it, the store
// LISTENs on a direct connection (named like the pool's connections), as
// a service behind such a pooler must.
func newStore(t testing.TB, pool *pgxpool.Pool, opts pgstore.Options) *pgstore.Store {
	t.Helper()
	return newStoreAt(t, pool, nil, opts)
}

// newStoreAt is newStore with now as the clock of every statement (nil:
// the database's).
func newStoreAt(t testing.TB, pool *pgxpool.Pool, now func() time.Time, opts pgstore.Options) *pgstore.Store {
	t.Helper()
	if lc := testdb.ListenConfig(t); lc != nil && !opts.NoListen && opts.ListenConfig == nil && throughPooler(t, pool) {
		lc.RuntimeParams["application_name"] = pool.Config().ConnConfig.RuntimeParams["application_name"]
		opts.ListenConfig = lc
	}
	s, err := pgstore.NewAt(pool, opts, now)
	if err != nil {
		t.Fatalf("pgstore.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestContract(t *testing.T) {
	idemtest.Run(t, func(t *testing.T, clock *idemtest.Clock) idem.Store {
		pool, _ := migrated(t)
		return newStoreAt(t, pool, clock.Now, pgstore.Options{Retention: idemtest.Retention, PollInterval: 50 * time.Millisecond})
	})
}

// TestContractPartitioned runs the contract on a claim table hash
// partitioned on (scope, key) (migrations.Options.Partitions).
func TestContractPartitioned(t *testing.T) {
	idemtest.Run(t, func(t *testing.T, clock *idemtest.Clock) idem.Store {
		pool, _ := migratedWith(t, migrations.Options{Partitions: 4})
		return newStoreAt(t, pool, clock.Now, pgstore.Options{Retention: idemtest.Retention, PollInterval: 50 * time.Millisecond})
	})
}

func migrationsUp(ctx context.Context, pool *pgxpool.Pool, table string) error {
	return migrations.Up(ctx, pool, migrations.Options{Table: table})
}

// throughPooler reports whether pool connects to TEST_POOLER_URL.
func throughPooler(t testing.TB, pool *pgxpool.Pool) bool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.PoolerURL())
	if err != nil {
		t.Fatalf("parse TEST_POOLER_URL: %v", err)
	}
	c := pool.Config().ConnConfig
	return c.Host == cfg.ConnConfig.Host && c.Port == cfg.ConnConfig.Port
}

// listenConn returns a connection a test can LISTEN on, closed when t ends:
// one taken out of pool, or a direct one when pool goes through a
// transaction-mode pooler.
func listenConn(t testing.TB, ctx context.Context, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	var conn *pgx.Conn
	if lc := testdb.ListenConfig(t); lc != nil && throughPooler(t, pool) {
		c, err := pgx.ConnectConfig(ctx, lc)
		if err != nil {
			t.Fatal(err)
		}
		conn = c
	} else {
		pc, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conn = pc.Hijack()
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}
