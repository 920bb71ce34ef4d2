package faults_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testhttp"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/pgstore"
)

// takeoverLease is the lease of both owners: shorter than the slow owner's
// handler.
const takeoverLease = time.Second

// lyingRenew is a store whose renewals report success without renewing: a
// slow owner that believes it still holds its claim (a paused process, a
// clock that runs slow, a renewal that reached nothing). Only the fencing
// token in CompleteTx can stop it.
type lyingRenew struct{ idem.Store }

func (s lyingRenew) Renew(_ context.Context, _ idem.Token, lease time.Duration) (time.Time, error) {
	return time.Now().Add(lease), nil
}

// failingRenew is a store whose renewals fail, as during a network
// partition between the owner and the database.
type failingRenew struct{ idem.Store }

func (s failingRenew) Renew(context.Context, idem.Token, time.Duration) (time.Time, error) {
	return time.Time{}, &idem.UnavailableError{Op: "renew", Err: errors.New("renewal cut off by the test")}
}

// owner is one instance: the middleware over its store, in front of a
// handler that inserts an invoice and completes the key in the same
// transaction (middleware.Commit with pgstore's CompleteTx).
type owner struct {
	name   string
	srv    *httptest.Server
	hold   chan struct{} // when non-nil, the handler waits for it (or its context) after inserting
	held   chan struct{} // closed when the handler has inserted and is holding
	result chan handlerOutcome
}

type handlerOutcome struct {
	commitErr error // what middleware.Commit returned
	ctxCause  error // the request context's cause when the handler resumed
}

func newOwner(t *testing.T, name string, pool *pgxpool.Pool, pg *pgstore.Store, store idem.Store, hold bool) *owner {
	t.Helper()
	o := &owner{name: name, held: make(chan struct{}), result: make(chan handlerOutcome, 1)}
	if hold {
		o.hold = make(chan struct{})
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, err := pool.Begin(ctx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO invoices (owner) VALUES ($1) RETURNING id`, o.name).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		var out handlerOutcome
		if o.hold != nil {
			close(o.held)
			select {
			case <-o.hold:
			case <-ctx.Done():
			}
			out.ctxCause = context.Cause(ctx)
		}
		out.commitErr = middleware.Commit(w, r, http.StatusCreated, http.Header{"Content-Type": {"application/json"}},
			[]byte(fmt.Sprintf(`{"id":%d,"owner":%q}`+"\n", id, o.name)),
			func(ctx context.Context, tok idem.Token, res idem.Result) error {
				if err := pg.CompleteTx(ctx, tx, tok, res); err != nil {
					return err
				}
				return tx.Commit(ctx)
			})
		o.result <- out
	})
	o.srv = httptest.NewServer(middleware.New(store, middleware.Options{Engine: engine.Options{Lease: takeoverLease, Wait: -1, Owner: name}})(h))
	t.Cleanup(o.srv.Close)
	return o
}

func setupTakeover(t *testing.T) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	pool, _ := testdb.Pool(t)
	return pool, teststore.Migrated(t, pool, pgstore.Options{Lease: takeoverLease},
		`CREATE TABLE invoices (id bigserial PRIMARY KEY, owner text NOT NULL)`)
}

// waitLeaseOver polls until the key's lease has run out by the database
// clock.
func waitLeaseOver(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	waitFor(t, "the slow owner's lease to run out", time.Minute, func() bool {
		var over bool
		err := pool.QueryRow(context.Background(),
			`SELECT lease_end < statement_timestamp() FROM idem_keys WHERE key = $1 AND state = 'claimed'`, "key/"+key).Scan(&over)
		return err == nil && over
	})
}

// TestSlowOwnerTakeover: a handler runs longer than its lease and its
// renewals do not reach the database. A second owner takes the key over and
// runs; the first owner's completion is rejected as stale, so its invoice
// (written in the same transaction) rolls back. Exactly one invoice.
func TestSlowOwnerTakeover(t *testing.T) {
	t.Parallel()

	t.Run("renewal silently lost: the fencing token rejects the completion", func(t *testing.T) {
		t.Parallel()
		pool, pg := setupTakeover(t)
		slow := newOwner(t, "slow", pool, pg, lyingRenew{pg}, true)
		fast := newOwner(t, "fast", pool, pg, pg, false)
		key := uniq("k")

		slowAnswer := sendTo(slow.srv.URL, key)
		<-slow.held
		waitLeaseOver(t, pool, key)

		r := mustPost(t, fast.srv.URL, "/", `{}`, "Idempotency-Key", key)
		if r.Status != http.StatusCreated || !strings.Contains(string(r.Body), `"owner":"fast"`) {
			t.Fatalf("second owner: %d %s, want 201 from the second owner", r.Status, r.Body)
		}
		close(slow.hold)
		out := <-slow.result
		if !errors.Is(out.commitErr, idem.ErrStaleClaim) {
			t.Fatalf("the slow owner's Commit returned %v, want a stale claim", out.commitErr)
		}
		sr, err := slowAnswer.result()
		if err != nil {
			t.Fatal(err)
		}
		if sr.Status != http.StatusServiceUnavailable || !strings.Contains(string(sr.Body), middleware.TypeCommitFailed) {
			t.Fatalf("the slow owner answered %d %s, want 503 commit failed", sr.Status, sr.Body)
		}
		assertTakeoverOutcome(t, pool, key, fast, r, true)
	})

	t.Run("renewal failing: the slow owner is cancelled", func(t *testing.T) {
		t.Parallel()
		pool, pg := setupTakeover(t)
		slow := newOwner(t, "slow", pool, pg, failingRenew{pg}, true)
		fast := newOwner(t, "fast", pool, pg, pg, false)
		key := uniq("k")

		slowAnswer := sendTo(slow.srv.URL, key)
		<-slow.held
		// The middleware cancels the handler once its lease may have run
		// out without a successful renewal; hold is never closed.
		out := <-slow.result
		if !errors.Is(out.ctxCause, idem.ErrLeaseLost) {
			t.Fatalf("the slow handler's context ended with %v, want ErrLeaseLost", out.ctxCause)
		}
		if out.commitErr == nil {
			t.Fatal("the slow owner's Commit succeeded after its lease was lost")
		}
		if sr, err := slowAnswer.result(); err != nil || sr.Status != http.StatusServiceUnavailable {
			t.Fatalf("the slow owner answered %+v, %v; want 503", sr, err)
		}
		// The failed commit released the key (the release reached the
		// store): the second owner claims it afresh.
		var r testhttp.Response
		waitFor(t, "the second owner to run", time.Minute, func() bool {
			r = mustPost(t, fast.srv.URL, "/", `{}`, "Idempotency-Key", key)
			return r.Status != http.StatusConflict
		})
		if r.Status != http.StatusCreated || !strings.Contains(string(r.Body), `"owner":"fast"`) {
			t.Fatalf("second owner: %d %s, want 201 from the second owner", r.Status, r.Body)
		}
		assertTakeoverOutcome(t, pool, key, fast, r, false)
	})
}

func assertTakeoverOutcome(t *testing.T, pool *pgxpool.Pool, key string, fast *owner, fastAnswer testhttp.Response, wantTakeover bool) {
	t.Helper()
	ctx := t.Context()
	var owners []string
	rows, err := pool.Query(ctx, `SELECT owner FROM invoices ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			t.Fatal(err)
		}
		owners = append(owners, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(owners) != 1 || owners[0] != "fast" {
		t.Fatalf("invoices by owner %v, want exactly one, the second owner's", owners)
	}
	var state string
	var takeover bool
	if err := pool.QueryRow(ctx, `SELECT state, takeover FROM idem_keys WHERE key = $1`, "key/"+key).Scan(&state, &takeover); err != nil {
		t.Fatal(err)
	}
	if state != "completed" || takeover != wantTakeover {
		t.Fatalf("key is %s (takeover %v), want completed (takeover %v)", state, takeover, wantTakeover)
	}
	// A retry, to either owner, replays the second owner's answer.
	r := mustPost(t, fast.srv.URL, "/", `{}`, "Idempotency-Key", key)
	if r.Status != fastAnswer.Status || string(r.Body) != string(fastAnswer.Body) || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry answered %d %s, want the replay of %d %s", r.Status, r.Body, fastAnswer.Status, fastAnswer.Body)
	}
}

// sendTo posts {} with key in the background.
func sendTo(base, key string) *background {
	b := &background{}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		b.resp, b.err = testhttp.Post(ctx, testhttp.NewClient(2*time.Minute), base+"/", `{}`, "Idempotency-Key", key)
	}()
	return b
}
