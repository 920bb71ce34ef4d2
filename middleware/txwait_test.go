package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/pgstore"
)

// gatedInvoice is a handler under InTransaction that inserts an invoice,
// says so on inside, and answers 201 only once gate is closed, whatever
// its context says: an original that outlives its statement bound.
func (k *txKit) gatedInvoice(inside chan<- struct{}, gate <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		k.calls.Add(1)
		var id int64
		if err := pgstore.TxFrom(r.Context()).QueryRow(r.Context(), `INSERT INTO invoices (customer) VALUES ('acme') RETURNING id`).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		inside <- struct{}{}
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
// Retry-After, never 503.
func TestInTransactionDuplicateOutwaitsMaxExecution(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	const maxExecution = 100 * time.Millisecond
	inside, gate := make(chan struct{}, 1), make(chan struct{})
	h := middleware.New(k.store, middleware.Options{InTransaction: true, Wait: 30 * time.Second, MaxExecution: maxExecution})(k.gatedInvoice(inside, gate))

	firstDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { firstDone <- postTo(h, "", "k") }()
	<-inside
	dupDone, dupReturned := make(chan *httptest.ResponseRecorder, 1), make(chan struct{})
	go func() { defer close(dupReturned); dupDone <- postTo(h, "", "k") }()
	if !testdb.WaitBlockedFor(t, k.pool, "idem_keys", 3*maxExecution, dupReturned) {
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
	patient := middleware.New(k.store, middleware.Options{InTransaction: true, Wait: 30 * time.Second, MaxExecution: maxExecution})(k.gatedInvoice(inside, gate))
	hasty := middleware.New(k.store, middleware.Options{InTransaction: true, Wait: wait, MaxExecution: maxExecution})(k.gatedInvoice(inside, gate))
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
	if took := time.Since(began); took < wait {
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
	original := middleware.New(k.store, middleware.Options{InTransaction: true})(k.gatedInvoice(inside, gate))
	const wait, storeTimeout = 300 * time.Millisecond, 5 * time.Second
	twoPhase := func(wait time.Duration) http.Handler {
		return middleware.New(k.store, middleware.Options{Wait: wait, StoreTimeout: storeTimeout})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
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
	if took < wait || took >= storeTimeout {
		t.Errorf("answered after %v; want after the wait of %v, well before the store timeout of %v", took, wait, storeTimeout)
	}

	dupDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { dupDone <- postTo(twoPhase(30*time.Second), "", "k") }()
	testdb.WaitLockWaiter(t, k.pool, "idem_keys") // the two-phase claim waits in PostgreSQL
	first := release()
	wantStatus(t, first, http.StatusCreated)
	wantReplay(t, first, <-dupDone)
	if n, calls := k.invoices(t), k.calls.Load(); n != 1 || calls != 1 {
		t.Errorf("%d invoices and %d handler calls, want 1 and 1", n, calls)
	}
}
