package middleware_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// TestPgstore runs the suite over PostgreSQL: a fresh, migrated schema per
// subtest. An outage is the store's pool closing under it.
func TestPgstore(t *testing.T) {
	t.Parallel()
	runSuite(t, func(t *testing.T) storeKit {
		pool, _ := testdb.Pool(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
			t.Fatalf("migrations.Up: %v", err)
		}
		store, err := pgstore.New(pool, pgstore.Options{PollInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatalf("pgstore.New: %v", err)
		}
		t.Cleanup(store.Close)
		return storeKit{store: store, breakStore: pool.Close}
	})
}
