package pgstore_test

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

// TestStatementsOnOneKeyUseThePrimaryKey checks the plans of the statements
// that touch one key (the claim, the takeover, the wait's mark, renewal,
// completion, release; the claim, takeover and completion in a
// transaction) on a table whose statistics say what a
// busy table's say: almost every row completed, hardly any claimed.
//
// The partial index on lease_end (WHERE state = 'claimed') then looks tiny
// to the planner, and a statement that names one key and also says
// state = 'claimed' is planned as a scan of that whole index, filtered on
// the key. The index is not tiny: every completion leaves the entry of the
// claimed version behind until vacuum, so such a statement reads one entry
// per key completed since the last vacuum, and each completion costs more
// than the one before (measured with one client: 0.6 ms, then 2.4 ms per
// completion 6,000 keys later). Each of these statements must find its key through the
// primary key.
//
// The plans are read with auto_explain (nested statements included, so
// the completion function's UPDATE is seen), forced generic: the plan a
// prepared statement settles on after its first executions, which is the
// one every later execution runs.
func TestStatementsOnOneKeyUseThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, schema := migrated(t)
	// Direct connections: plans are the server's business, and the
	// session settings below would not survive a transaction pooler.
	pool := testdb.NewPool(t, testdb.DirectConfig(t, schema))

	// A busy table's: 5,000 keys claimed and then completed (each
	// completion an UPDATE, as pgstore's), and no claim among them, as
	// ANALYZE sees a few claims in flight among millions of rows.
	if _, err := pool.Exec(ctx, `
		INSERT INTO idem_keys (scope, key, generation, state, lease_end, created_at)
		SELECT 's'::bytea, 'done-' || g, nextval('idem_keys_generation_seq'), 'claimed', now() + interval '1 hour', now()
		  FROM generate_series(1, 5000) g;
		UPDATE idem_keys SET state = 'completed', result = '{"status":200}', lease_end = NULL,
		       completed_at = now(), expires_at = now() + interval '1 day'`); err != nil {
		t.Fatal(err)
	}
	// Just vacuumed: the partial index is empty, so it looks cheapest, and
	// a plan made now stays while completions refill it.
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE idem_keys`); err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		plans []string
	)
	cfg := testdb.DirectConfig(t, schema)
	cfg.MaxConns = 2 // one for the waiter, one for the rest
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.Contains(n.Message, "plan:") {
			mu.Lock()
			plans = append(plans, n.Message)
			mu.Unlock()
		}
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `LOAD 'auto_explain';
			SET auto_explain.log_min_duration = 0;
			SET auto_explain.log_nested_statements = on;
			SET auto_explain.log_level = notice;
			SET client_min_messages = notice;
			SET plan_cache_mode = force_generic_plan`)
		return err
	}
	clock := idemtest.NewClock()
	s := newStoreAt(t, testdb.NewPool(t, cfg), clock.Now, pgstore.Options{})

	req := func(k string) idem.ClaimRequest { return idem.ClaimRequest{Scope: "s", Key: key(k), Fingerprint: "fp"} }
	c := mustClaim(t, ctx, s, req("a"), idem.Acquired)
	if _, err := s.Renew(ctx, c.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.Wait(ctx, "s", key("a")) }()
	waitForMark(t, ctx, pool, "a")
	if err := s.Complete(ctx, c.Token, idem.Result{Status: 201, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	mustClaim(t, ctx, s, req("a"), idem.Completed)
	large := mustClaim(t, ctx, s, req("large"), idem.Acquired)
	if err := s.Complete(ctx, large.Token, idem.Result{Status: 200, Body: bytes.Repeat([]byte("x"), 1<<20)}); err != nil {
		t.Fatal(err)
	}
	r := mustClaim(t, ctx, s, req("b"), idem.Acquired)
	if err := s.Release(ctx, r.Token); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("c"), Lease: time.Second}, idem.Acquired)
	clock.Advance(2 * time.Second)
	if c := mustClaim(t, ctx, s, req("c"), idem.Acquired); !c.Takeover {
		t.Fatal("the claim of an expired key did not take it over")
	}
	// The one-commit path: a claim and its completion in a transaction,
	// and a takeover in one.
	limits := idem.TxLimits{Wait: time.Second}
	_, tx := beginClaim(t, ctx, s, "d", limits, idem.Acquired)
	if err := tx.Commit(ctx, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("e"), Fingerprint: "fp", Lease: time.Second}, idem.Acquired)
	clock.Advance(2 * time.Second)
	if c, tx := beginClaim(t, ctx, s, "e", limits, idem.Acquired); !c.Takeover {
		t.Fatal("the claim in a transaction of an expired key did not take it over")
	} else if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(plans) < 10 {
		t.Fatalf("auto_explain reported %d plans, want one per statement (at least 10)", len(plans))
	}
	partial := regexp.MustCompile(`idem_keys_(lease_end|expires_at)_idx`)
	for _, p := range plans {
		if partial.MatchString(p) {
			t.Errorf("a statement on one key scans a partial index instead of the primary key:\n%s", p)
		}
	}
}

// waitForMark returns once a waiter has marked k's row as waited on.
func waitForMark(t *testing.T, ctx context.Context, pool *pgxpool.Pool, k string) {
	t.Helper()
	for {
		var waited bool
		if err := pool.QueryRow(ctx, `SELECT waited FROM idem_keys WHERE scope = 's' AND key = $1`, key(k).String()).Scan(&waited); err != nil {
			t.Fatal(err)
		}
		if waited {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no waiter marked the row")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
