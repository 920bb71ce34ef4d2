package middleware_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/pgstore"
)

// gatedInvoice is a handler under InTransaction that inserts an invoice,
// says so on inside (also if the insert failed, which it then answers with
// 503), and answers 201 only once gate is closed, whatever its context
// says: an original that outlives its statement bound.
func (k *txKit) gatedInvoice(inside chan<- struct{}, gate <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		k.calls.Add(1)
		var id int64
		err := pgstore.TxFrom(r.Context()).QueryRow(r.Context(), `INSERT INTO invoices (customer) VALUES ('acme') RETURNING id`).Scan(&id)
		inside <- struct{}{}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		<-gate
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
	}
}

// TestInTransactionDuplicateOutwaitsMaxExecution: on the one-commit path a
// duplicate waits for the original up to Wait, even when Wait is longer
// than MaxExecution (which bounds the statements of a claim's transaction):
// it replays the original's answer once that commits, and, with the
// original still open when Wait runs out, it is answered 409 with
// Retry-After, never 503. (The original outlives its MaxExecution idle:
// IdleInTransaction, which would otherwise be MaxExecution, lets it.)
func TestInTransactionDuplicateOutwaitsMaxExecution(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	const maxExecution, idle = 300 * time.Millisecond, 30 * time.Second
	inside, gate := make(chan struct{}, 1), make(chan struct{})
	h := middleware.New(k.Store, middleware.Options{InTransaction: true, Engine: engine.Options{Wait: 30 * time.Second, MaxExecution: maxExecution, IdleInTransaction: idle}})(k.gatedInvoice(inside, gate))

	firstDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { firstDone <- postTo(h, "", "k") }()
	<-inside
	dupDone, dupReturned := make(chan *httptest.ResponseRecorder, 1), make(chan struct{})
	go func() { defer close(dupReturned); dupDone <- postTo(h, "", "k") }()
	if !testdb.WaitBlockedFor(t, k.Pool, "idem_keys", 3*maxExecution, dupReturned) {
		close(gate)
		rec := <-dupDone
		t.Fatalf("the duplicate was answered %d %s while the original was still open", rec.Code, rec.Body)
	}
	close(gate)
	first := <-firstDone
	wantStatus(t, first, http.StatusCreated)
	wantReplay(t, first, <-dupDone)
	if n, calls := k.invoices(t), k.calls.Load(); n != 1 || calls != 1 {
		t.Errorf("%d invoices and %d handler calls, want 1 and 1", n, calls)
	}

	// The original still open when the duplicate's Wait runs out.
	const wait = 4 * maxExecution
	inside, gate = make(chan struct{}, 1), make(chan struct{})
	patient := middleware.New(k.Store, middleware.Options{InTransaction: true, Engine: engine.Options{Wait: 30 * time.Second, MaxExecution: maxExecution, IdleInTransaction: idle}})(k.gatedInvoice(inside, gate))
	hasty := middleware.New(k.Store, middleware.Options{InTransaction: true, Engine: engine.Options{Wait: wait, MaxExecution: maxExecution, IdleInTransaction: idle}})(k.gatedInvoice(inside, gate))
	secondDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { secondDone <- postTo(patient, "", "k2") }()
	defer func() { close(gate); <-secondDone }()
	<-inside
	began := time.Now()
	rec := postTo(hasty, "", "k2")
	wantProblem(t, rec, http.StatusConflict, middleware.TypeInFlight)
	if rec.Header().Get("Retry-After") == "" {
		t.Error("409 without Retry-After")
	}
	if took := time.Since(began); took < wait-testdb.ClockSlack {
		t.Errorf("answered after %v, before the wait of %v ran out", took, wait)
	}
}

// TestTwoPhaseClaimOfAKeyHeldInATransaction: a two-phase claim (a
// middleware without InTransaction, on the same store and route) of a key
// held by an open claim in a transaction waits for that transaction up to
// its Wait, as a duplicate on the one-commit path does: it replays the
// original once that commits; with the original still open when Wait runs
// out, it is answered 409 with Retry-After, well before its StoreTimeout,
// and its handler never runs.
func TestTwoPhaseClaimOfAKeyHeldInATransaction(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	inside, gate := make(chan struct{}, 1), make(chan struct{})
	original := middleware.New(k.Store, middleware.Options{InTransaction: true})(k.gatedInvoice(inside, gate))
	const wait, storeTimeout = 300 * time.Millisecond, 5 * time.Second
	twoPhase := func(wait time.Duration) http.Handler {
		return middleware.New(k.Store, middleware.Options{Engine: engine.Options{Wait: wait, StoreTimeout: storeTimeout}})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			t.Error("the two-phase handler ran while the key was held")
			w.WriteHeader(http.StatusCreated)
		}))
	}

	firstDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { firstDone <- postTo(original, "", "k") }()
	release := sync.OnceValue(func() *httptest.ResponseRecorder { close(gate); return <-firstDone })
	defer release()
	<-inside
	began := time.Now()
	rec := postTo(twoPhase(wait), "", "k")
	took := time.Since(began)
	t.Logf("the two-phase claim was answered %d after %v", rec.Code, took)
	wantProblem(t, rec, http.StatusConflict, middleware.TypeInFlight)
	if rec.Header().Get("Retry-After") == "" {
		t.Error("409 without Retry-After")
	}
	if took < wait-testdb.ClockSlack || took >= storeTimeout {
		t.Errorf("answered after %v; want after the wait of %v, well before the store timeout of %v", took, wait, storeTimeout)
	}

	dupDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { dupDone <- postTo(twoPhase(30*time.Second), "", "k") }()
	testdb.WaitLockWaiter(t, k.Pool, "idem_keys") // the two-phase claim waits in PostgreSQL
	first := release()
	wantStatus(t, first, http.StatusCreated)
	wantReplay(t, first, <-dupDone)
	if n, calls := k.invoices(t), k.calls.Load(); n != 1 || calls != 1 {
		t.Errorf("%d invoices and %d handler calls, want 1 and 1", n, calls)
	}
}

// TestInTransactionPauseLongerThanTheLease is the demo's shape (-lease 2s,
// a handler that spends 3s between two statements), scaled down: on the
// one-commit path the lease is no lease (nothing renews it), and a
// handler that pauses longer than it between its statements, well within
// MaxExecution, is healthy work that commits.
func TestInTransactionPauseLongerThanTheLease(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	const lease = 300 * time.Millisecond
	h := middleware.New(k.Store, middleware.Options{InTransaction: true, Engine: engine.Options{Lease: lease}})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := pgstore.TxFrom(r.Context())
		// A real pause: PostgreSQL measures the idle time between
		// statements on its own clock.
		time.Sleep(2 * lease)
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO invoices (customer) VALUES ('acme') RETURNING id`).Scan(&id); err != nil {
			http.Error(w, "db: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
	}))
	rec := postTo(h, "", "k")
	wantStatus(t, rec, http.StatusCreated)
	if n := k.invoices(t); n != 1 {
		t.Errorf("%d invoices, want 1", n)
	}
}

// TestInTransactionEndedByTheDatabase: when PostgreSQL itself ends a
// claim's transaction (idle between two statements longer than the idle
// bound, 25P03) or cancels a statement of the work (a statement_timeout,
// here the session's, 57014), nothing commits, and the client is told so,
// with the setting to raise, rather than "retry": a retry meets the same
// bound. The log says it too, as an error.
func TestInTransactionEndedByTheDatabase(t *testing.T) {
	t.Parallel()
	const bound = 200 * time.Millisecond
	insert := func(r *http.Request) error {
		_, err := pgstore.TxFrom(r.Context()).Exec(r.Context(), `INSERT INTO invoices (customer) VALUES ('acme')`)
		return err
	}
	for _, tc := range []struct {
		name        string
		idle        time.Duration // Options.Engine.IdleInTransaction
		session     bool          // the store's sessions have statement_timeout = bound
		handler     func(w http.ResponseWriter, r *http.Request)
		wantSetting string // in the answer and the log
	}{
		{"idle, then a statement", bound, false, func(w http.ResponseWriter, r *http.Request) {
			if err := insert(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			time.Sleep(3 * bound)
			if err := insert(r); err != nil {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "database unavailable, retry with the same key", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}, "IdleInTransaction"},
		{"idle, then the answer", bound, false, func(w http.ResponseWriter, r *http.Request) {
			if err := insert(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			time.Sleep(3 * bound)
			w.WriteHeader(http.StatusCreated)
		}, "IdleInTransaction"},
		{"idle, then Commit", bound, false, func(w http.ResponseWriter, r *http.Request) {
			if err := insert(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			time.Sleep(3 * bound)
			if err := middleware.Commit(w, r, http.StatusCreated, nil, []byte(`{"id":1}`), nil); !errors.Is(err, idem.ErrTxLimit) {
				t.Errorf("Commit = %v, want an idem.TxLimitError", err)
			}
		}, "IdleInTransaction"},
		{"a statement past the session's statement_timeout", 0, true, func(w http.ResponseWriter, r *http.Request) {
			if err := insert(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			if _, err := pgstore.TxFrom(r.Context()).Exec(r.Context(), `SELECT pg_sleep(5)`); err != nil {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "database unavailable, retry with the same key", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}, "statement_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k := newTxKit(t)
			store := k.Store
			if tc.session {
				cfg := testdb.Config(t, k.Schema)
				cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(bound.Milliseconds())
				s, err := pgstore.New(testdb.NewPool(t, cfg), pgstore.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				store = s
			}
			var (
				log    testlog.Buffer
				mu     sync.Mutex
				events []idem.Event
			)
			opts := middleware.Options{InTransaction: true, Engine: engine.Options{
				IdleInTransaction: tc.idle,
				Logger:            slog.New(slog.NewTextHandler(&log, nil)),
			},
				Observer: func(_ *http.Request, e idem.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }}
			h := middleware.New(store, opts)(http.HandlerFunc(tc.handler))
			for range 2 { // the retry meets the same bound
				rec := postTo(h, "", "k")
				p := wantProblem(t, rec, http.StatusInternalServerError, middleware.TypeTransactionLimit)
				if detail, _ := p["detail"].(string); !strings.Contains(detail, tc.wantSetting) {
					t.Errorf("the answer's detail %q does not name %s", detail, tc.wantSetting)
				}
				if rec.Header().Get("Retry-After") != "" {
					t.Errorf("the answer says Retry-After %s", rec.Header().Get("Retry-After"))
				}
			}
			if n := k.invoices(t); n != 0 {
				t.Errorf("%d invoices, want 0", n)
			}
			if got := log.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, tc.wantSetting) {
				t.Errorf("the log does not say, as an error, which setting ended the transaction:\n%s", got)
			}
			mu.Lock()
			defer mu.Unlock()
			released := 0
			for _, e := range events {
				switch e.Kind {
				case idem.EventReleased:
					released++
					if !errors.Is(e.Err, idem.ErrTxLimit) {
						t.Errorf("EventReleased with cause %v, want the idem.TxLimitError", e.Err)
					}
				case idem.EventStoreError:
					t.Errorf("a store error reported: %v (the store is fine)", e.Err)
				}
			}
			if released != 2 {
				t.Errorf("%d EventReleased for 2 requests, want one each; events %v", released, events)
			}
		})
	}
}
