package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// TestClaimOfANewKeyWaitsOutATableLock: a two-phase claim of a key nobody
// holds, sent without a Wait (the first look of every request), while
// another session holds a lock on the table that is not the key's (LOCK
// TABLE … IN SHARE MODE, as a migration or CREATE INDEX takes), waits for
// that lock like any statement and then acquires the key. Only a wait for
// the key itself is bounded by Wait: a lock that is not the key's never
// makes a new key look in flight.
func TestClaimOfANewKeyWaitsOutATableLock(t *testing.T) {
	parallelUnlessPooled(t)
	for _, tc := range []struct {
		name       string
		partitions int
		lock       string
	}{
		{"the table", 0, `LOCK TABLE idem_keys IN SHARE MODE`},
		// A partition is locked when the INSERT routes its row there, in
		// the middle of the statement.
		{"its partitions", 2, `LOCK TABLE idem_keys_p0, idem_keys_p1 IN SHARE MODE`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parallelUnlessPooled(t)
			testClaimWaitsOutALock(t, tc.partitions, tc.lock)
		})
	}
}

func testClaimWaitsOutALock(t *testing.T, partitions int, lock string) {
	ctx := testCtx(t)
	pool, schema := migratedWith(t, migrations.Options{Partitions: partitions})
	s := newStore(t, pool, pgstore.Options{})
	monitor := sessionPool(t, pool, schema)
	// Warm the store up (its first claim also asks for the encoding).
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("warm-up")}, idem.Acquired)

	const held = 300 * time.Millisecond
	locker, err := monitor.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Rollback(context.Background()) }()
	if _, err := locker.Exec(ctx, lock); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(held)
		_ = locker.Rollback(context.Background())
	}()

	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := s.Claim(cctx, idem.ClaimRequest{Scope: "s", Key: key("new"), Fingerprint: "fp"})
	<-released
	switch {
	case err != nil && cctx.Err() != nil:
		// The lock outlived the context: unavailable is a fair answer.
	case err != nil:
		t.Fatalf("claim of a new key behind a table lock: %v", err)
	case c.Status != idem.Acquired:
		t.Fatalf("claim of a new key behind a table lock = %v (%+v), want Acquired once the lock is released", c.Status, c)
	}
}
