package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
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

// TestBeginClaimWritesTheRowOnce: a new key on the one-commit path writes
// one tuple, the row in its final state: no claimed row, no update. In a
// fresh table the row is the first tuple of the first page.
func TestBeginClaimWritesTheRowOnce(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	c, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	var rows int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM idem_keys`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("rows while the claim is open: %d, %v; want none", rows, err)
	}
	insertInvoice(t, f.ctx, tx, "inv-1")
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Fatal(err)
	}
	var ctid string
	if err := f.pool.QueryRow(f.ctx, `SELECT ctid::text FROM idem_keys WHERE key = $1`, key("a").String()).Scan(&ctid); err != nil {
		t.Fatal(err)
	}
	if ctid != "(0,1)" {
		t.Errorf("the row is tuple %s, want (0,1): more than one version was written", ctid)
	}
	if e := mustInspect(t, f.ctx, f.s, "a"); e.State != idem.StateCompleted || e.Generation != c.Token.Generation {
		t.Errorf("the row: %+v, want completed by generation %d", e, c.Token.Generation)
	}
}

// TestBeginClaimTakeoverIsFenced: a claim in a transaction that takes over
// an expired two-phase claim holds the key against other claims (a
// two-phase claim finds it in flight, not expired), and its completion
// takes the row only if it is still what the claim found: when the old
// owner completes meanwhile, the transaction's Commit fails with a stale
// claim, and nothing of it commits.
func TestBeginClaimTakeoverIsFenced(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	old := mustClaim(t, f.ctx, f.s, idem.ClaimRequest{Scope: "s", Key: key("k"), Lease: time.Millisecond}, idem.Acquired)
	time.Sleep(5 * time.Millisecond)
	c, tx := beginClaim(t, f.ctx, f.s, "k", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)
	if !c.Takeover || c.Token.Generation == old.Token.Generation {
		t.Fatalf("takeover claim %+v", c)
	}
	if got, err := f.s.Claim(f.ctx, idem.ClaimRequest{Scope: "s", Key: key("k")}); err != nil || got.Status != idem.InFlight {
		t.Fatalf("a two-phase claim of the key taken over in a transaction: %+v, %v; want in flight", got, err)
	}
	insertInvoice(t, f.ctx, tx, "inv-1")
	late := idem.Result{Status: 200, Body: []byte("late")}
	if err := f.s.Complete(f.ctx, old.Token, late); err != nil {
		t.Fatalf("the old owner's completion: %v", err)
	}
	var se *idem.StaleClaimError
	if err := tx.Commit(f.ctx, txResult); !errors.As(err, &se) || se.Token != c.Token {
		t.Fatalf("Commit after the old owner completed = %v, want a stale claim", err)
	}
	if n := f.invoices(t); n != 0 {
		t.Errorf("%d invoices committed with a stale claim", n)
	}
	if got := mustClaim(t, f.ctx, f.s, idem.ClaimRequest{Scope: "s", Key: key("k")}, idem.Completed); !got.Result.Equal(late) {
		t.Errorf("replay %+v, want the old owner's result", got.Result)
	}
}

// TestBeginClaimNewKeyMeetsAnUnlockedRow: a new key's row is a plain
// INSERT at the commit (sql/tx_complete.sql without .Takeover). A row of
// the key written meanwhile without the key's lock (as a claim of a
// version before the lock would) makes the Commit a stale claim, and
// nothing of the transaction commits; the row written meanwhile stays.
func TestBeginClaimNewKeyMeetsAnUnlockedRow(t *testing.T) {
	t.Parallel()
	for _, partitions := range []int{0, 2} {
		t.Run(fmt.Sprint("partitions=", partitions), func(t *testing.T) {
			t.Parallel()
			testNewKeyMeetsAnUnlockedRow(t, partitions)
		})
	}
}

// testNewKeyMeetsAnUnlockedRow: on a partitioned table the primary key
// that refuses the row is the partition's.
func testNewKeyMeetsAnUnlockedRow(t *testing.T, partitions int) {
	ctx := testCtx(t)
	pool, schema := migratedWith(t, migrations.Options{Partitions: partitions})
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	f := &txFixture{ctx: ctx, pool: pool, schema: schema, s: newStore(t, pool, pgstore.Options{}), monitor: sessionPool(t, pool, schema)}
	other := mustClaim(t, f.ctx, f.s, idem.ClaimRequest{Scope: "s", Key: key("other")}, idem.Acquired)
	c, tx := beginClaim(t, f.ctx, f.s, "k", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)
	if c.Takeover {
		t.Fatalf("claim of a new key %+v is a takeover", c)
	}
	insertInvoice(t, f.ctx, tx, "inv-1")
	if _, err := f.monitor.Exec(f.ctx, `UPDATE idem_keys SET key = $1 WHERE key = $2`, key("k").String(), key("other").String()); err != nil {
		t.Fatal(err)
	}
	var se *idem.StaleClaimError
	if err := tx.Commit(f.ctx, txResult); !errors.As(err, &se) || se.Token != c.Token {
		t.Fatalf("Commit over a row written without the lock = %v, want a stale claim", err)
	}
	if n := f.invoices(t); n != 0 {
		t.Errorf("%d invoices committed with a stale claim", n)
	}
	if e := mustInspect(t, f.ctx, f.s, "k"); e.Generation != other.Token.Generation {
		t.Errorf("the key's row %+v, want the one written meanwhile (generation %d)", e, other.Token.Generation)
	}
}

// TestKeyLocksAreTheTables: the same scope and key in two tables (here in
// two schemas) are two locks: a claim in a transaction on one table does
// not hold the key of the other.
func TestKeyLocksAreTheTables(t *testing.T) {
	t.Parallel()
	one, other := newTxFixture(t, pgstore.Options{}), newTxFixture(t, pgstore.Options{})
	_, tx := beginClaim(t, one.ctx, one.s, "k", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)
	mustClaim(t, other.ctx, other.s, idem.ClaimRequest{Scope: "s", Key: key("k"), Fingerprint: "fp"}, idem.Acquired)
	if got, err := one.s.Claim(one.ctx, idem.ClaimRequest{Scope: "s", Key: key("k")}); err != nil || got.Status != idem.InFlight {
		t.Fatalf("a two-phase claim on the holder's table: %+v, %v; want in flight", got, err)
	}
}

// TestBeginClaimLargeResults: a result of 64 KiB or more, text or binary,
// is written with the key's row at the commit (sql/tx_complete.sql with
// .Large) and replayed as it was, whatever the connection's query exec
// mode.
func TestBeginClaimLargeResults(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, schema := migrated(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		cfg := testdb.Config(t, schema)
		cfg.ConnConfig.DefaultQueryExecMode = mode
		s := newStore(t, testdb.NewPool(t, cfg), pgstore.Options{})
		for name, body := range map[string][]byte{
			"text":   bytes.Repeat([]byte("0123456789abcdef"), 8<<10),
			"binary": bytes.Repeat([]byte{0, 0xff, 'a', 'b'}, 32<<10),
		} {
			k := fmt.Sprint(mode, "-", name)
			_, tx := beginClaim(t, ctx, s, k, txLimits, idem.Acquired)
			res := idem.Result{Status: 201, Body: body}
			if err := tx.Commit(ctx, res); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			got := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key(k), Fingerprint: "fp"}, idem.Completed)
			if !got.Result.Equal(res) {
				t.Errorf("%s: replayed %d bytes, not the %d recorded", k, len(got.Result.Body), len(body))
			}
		}
	}
}
