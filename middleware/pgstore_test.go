package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/pgstore"
)

// TestPgstore runs the suite over PostgreSQL: a fresh, migrated schema per
// subtest. An outage is the store's pool closing under it.
func TestPgstore(t *testing.T) {
	t.Parallel()
	runSuite(t, func(t *testing.T) storeKit {
		pool, _ := testdb.Pool(t)
		store := teststore.Migrated(t, pool, pgstore.Options{PollInterval: 50 * time.Millisecond})
		return storeKit{store: store, breakStore: pool.Close}
	})
}

// TestPgstoreCommitTx is exactly-once with a handler whose side effect is in
// the store's database: the invoice row and the recorded response commit in
// one transaction, or neither does.
func TestPgstoreCommitTx(t *testing.T) {
	t.Parallel()
	pool, _ := testdb.Pool(t)
	ctx := t.Context()
	store := teststore.Migrated(t, pool, pgstore.Options{PollInterval: 50 * time.Millisecond},
		`CREATE TABLE invoices (id bigserial PRIMARY KEY, customer text NOT NULL)`)

	// failure, when set, happens inside record after the row was written.
	var failure atomic.Value // func(ctx, tok) error
	failure.Store(func(context.Context, idem.Token) error { return nil })
	commitErr := make(chan error, 1)
	h := middleware.New(store, middleware.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := pool.Begin(r.Context())
		if err != nil {
			commitErr <- err
			http.Error(w, "db", http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback(context.WithoutCancel(r.Context()))
		var id int64
		body, _ := io.ReadAll(r.Body)
		if err := tx.QueryRow(r.Context(), `INSERT INTO invoices (customer) VALUES ($1) RETURNING id`, string(body)).Scan(&id); err != nil {
			commitErr <- err
			http.Error(w, "db", http.StatusServiceUnavailable)
			return
		}
		commitErr <- middleware.Commit(w, r, http.StatusCreated, http.Header{"Content-Type": {"application/json"}},
			[]byte(fmt.Sprintf(`{"id":%d}`, id)),
			func(ctx context.Context, tok idem.Token, res idem.Result) error {
				if err := failure.Load().(func(context.Context, idem.Token) error)(ctx, tok); err != nil {
					return err
				}
				if err := store.CompleteTx(ctx, tx, tok, res); err != nil {
					return err
				}
				return tx.Commit(ctx)
			})
	}))
	invoices := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Committed: one row, and the retry replays it.
	first := serve(h, newReq("POST", "/invoices", `acme`, key("k1")))
	if err := <-commitErr; err != nil {
		t.Fatal(err)
	}
	wantStatus(t, first, http.StatusCreated)
	wantReplay(t, first, serve(h, newReq("POST", "/invoices", `acme`, key("k1"))))
	if n := invoices(); n != 1 {
		t.Fatalf("%d invoices, want 1", n)
	}

	// The claim is lost before the completion (an operator forgot the key
	// under the running handler): CompleteTx is stale, nothing commits.
	failure.Store(func(ctx context.Context, tok idem.Token) error {
		_, err := store.Forget(ctx, tok.Scope, tok.Key, true)
		return err
	})
	rec := serve(h, newReq("POST", "/invoices", `globex`, key("k2")))
	if err := <-commitErr; !errors.Is(err, idem.ErrStaleClaim) {
		t.Fatalf("Commit with a forgotten claim = %v, want a stale claim", err)
	}
	wantProblem(t, rec, http.StatusServiceUnavailable, middleware.TypeCommitFailed)
	if n := invoices(); n != 1 {
		t.Fatalf("%d invoices after a stale commit, want 1", n)
	}

	// The transaction fails: nothing commits, the key is released, and the
	// retry creates the invoice once.
	failure.Store(func(context.Context, idem.Token) error { return errors.New("serialization failure") })
	rec = serve(h, newReq("POST", "/invoices", `initech`, key("k3")))
	if err := <-commitErr; err == nil {
		t.Fatal("Commit with a failing transaction returned nil")
	}
	wantProblem(t, rec, http.StatusServiceUnavailable, middleware.TypeCommitFailed)
	failure.Store(func(context.Context, idem.Token) error { return nil })
	retry := serve(h, newReq("POST", "/invoices", `initech`, key("k3")))
	if err := <-commitErr; err != nil {
		t.Fatal(err)
	}
	wantStatus(t, retry, http.StatusCreated)
	wantReplay(t, retry, serve(h, newReq("POST", "/invoices", `initech`, key("k3"))))
	if n := invoices(); n != 2 {
		t.Fatalf("%d invoices, want 2", n)
	}
}

// TestPgstoreCompleteAfterConnectionKilled: while the handler runs, the
// backend of the pool's only connection is terminated
// (pg_terminate_backend), so the completion's first attempt fails on a dead
// connection. The completion is tried again on a new one, within
// StoreTimeout: the result is recorded and the client's retry replays it
// (instead of a 409 until the lease runs out, then a second run).
func TestPgstoreCompleteAfterConnectionKilled(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	cfg := testdb.Config(t, schema)
	cfg.MaxConns = 1
	pool := testdb.NewPool(t, cfg)
	store := teststore.Migrated(t, pool, pgstore.Options{NoListen: true})
	admin := testdb.NewPool(t, testdb.DirectConfig(t, schema))
	var events idemtest.Events
	var runs atomic.Int64
	h := middleware.New(store, middleware.Options{Engine: engine.Options{Wait: -1}, Scope: fixedScope, Observer: events.ObserveHTTP})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			conn, err := pool.Acquire(r.Context())
			if err != nil {
				t.Errorf("acquire: %v", err)
				return
			}
			pid := conn.Conn().PgConn().PID()
			conn.Release()
			var killed bool
			if err := admin.QueryRow(r.Context(), `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&killed); err != nil || !killed {
				t.Errorf("pg_terminate_backend(%d) = %v, %v", pid, killed, err)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"charge":1}`)
		}))
	first := serve(h, newReq("POST", "/charge", `{}`, key("killed")))
	wantStatus(t, first, http.StatusCreated)
	retry := serve(h, newReq("POST", "/charge", `{}`, key("killed")))
	if retry.Code != http.StatusCreated || retry.Header().Get(middleware.ReplayedHeader) != "true" || runs.Load() != 1 {
		t.Fatalf("retry: %d %s (replayed %q) after %d runs; events %v; want the first answer replayed",
			retry.Code, retry.Body, retry.Header().Get(middleware.ReplayedHeader), runs.Load(), events.Kinds())
	}
	if n := events.Count(idem.EventStoreError); n != 0 {
		t.Fatalf("events %v, want no store error", events.Kinds())
	}
}
