package pgstore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
)

// migratedStore returns a pool on a fresh, migrated schema and a store on
// it without a sweeper, closed when t ends, for the package's own tests.
func migratedStore(t *testing.T, ctx context.Context, opts Options) (*pgxpool.Pool, *Store) {
	t.Helper()
	pool, _ := testdb.Pool(t)
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	opts.SweepInterval = -1
	s, err := New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return pool, s
}
