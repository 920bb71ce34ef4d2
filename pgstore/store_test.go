package pgstore_test

import (
	"context"
	"testing"
	"time"

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
	pool, schema := testdb.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	return pool, schema
}

// newStore opens a store on pool, closed when t ends.
func newStore(t testing.TB, pool *pgxpool.Pool, opts pgstore.Options) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(pool, opts)
	if err != nil {
		t.Fatalf("pgstore.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestContract(t *testing.T) {
	idemtest.Run(t, func(t *testing.T, clock *idemtest.Clock) idem.Store {
		pool, _ := migrated(t)
		return newStore(t, pool, pgstore.Options{Now: clock.Now, Retention: idemtest.Retention, PollInterval: 50 * time.Millisecond})
	})
}

func migrationsUp(ctx context.Context, pool *pgxpool.Pool, table string) error {
	return migrations.Up(ctx, pool, migrations.Options{Table: table})
}
