package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/pgstore"
)

// txKit is a migrated schema with an invoices table and a store on it.
type txKit struct {
	*teststore.Kit
	calls atomic.Int64
}

func newTxKit(t *testing.T) *txKit {
	t.Helper()
	return &txKit{Kit: teststore.NewKit(t, pgstore.Options{PollInterval: 50 * time.Millisecond},
		`CREATE TABLE invoices (id bigserial PRIMARY KEY, customer text NOT NULL)`)}
}

func (k *txKit) invoices(t *testing.T) int { return k.Count(t, "invoices") }

// create is a handler under InTransaction: it inserts the invoice named
// by the body in the claim's transaction and answers 201 with its id.
// Bodies "fail", "panic", "bad", "broken" and "slow" make it answer 503,
// panic, answer 400, answer 201 after a statement failed, and wait for
// its context to end, then fail on its next statement and answer 503.
func (k *txKit) create(t *testing.T, client *atomic.Pointer[httptest.ResponseRecorder]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		k.calls.Add(1)
		tx := pgstore.TxFrom(r.Context())
		if tx == nil {
			t.Error("no transaction in the handler's context")
			http.Error(w, "no tx", http.StatusInternalServerError)
			return
		}
		body, _ := io.ReadAll(r.Body)
		customer := string(body)
		if customer == "bad" {
			http.Error(w, "bad invoice", http.StatusBadRequest)
			return
		}
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO invoices (customer) VALUES ($1) RETURNING id`, customer).Scan(&id); err != nil {
			http.Error(w, "db: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		switch customer {
		case "fail":
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		case "panic":
			panic("the handler panicked")
		case "broken":
			_, _ = tx.Exec(r.Context(), `SELECT 1/0`) // the transaction fails; the handler does not look
		case "slow":
			<-r.Context().Done()
			if _, err := tx.Exec(r.Context(), `SELECT 1`); err != nil {
				http.Error(w, "cut off: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/invoices/%d", id))
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
		if c := client.Load(); c != nil && (c.Body.Len() > 0 || c.Code != http.StatusOK) {
			t.Error("the response reached the client before the transaction committed")
		}
	}
}

func postTo(h http.Handler, body, k string) *httptest.ResponseRecorder {
	return serve(h, newReq("POST", "/invoices", body, key(k)))
}

// TestInTransaction: the claim, the handler's insert and the recorded
// response commit together; every answer but a recorded one rolls all of
// it back, and the retry runs at once.
func TestInTransaction(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	opts := middleware.Options{InTransaction: true}

	var watched atomic.Pointer[httptest.ResponseRecorder]
	client := httptest.NewRecorder()
	watched.Store(client)
	h := middleware.New(k.Store, opts)(k.create(t, &watched))
	h.ServeHTTP(client, newReq("POST", "/invoices", "acme", key("k1")))
	watched.Store(nil)
	wantStatus(t, client, http.StatusCreated)
	if loc := client.Header().Get("Location"); !strings.HasPrefix(loc, "/invoices/") {
		t.Errorf("Location %q", loc)
	}
	wantReplay(t, client, postTo(h, "acme", "k1"))
	if n := k.invoices(t); n != 1 {
		t.Fatalf("%d invoices, want 1", n)
	}

	// 400: recorded (with whatever the handler wrote: nothing here).
	first := postTo(h, "bad", "k2")
	wantStatus(t, first, http.StatusBadRequest)
	wantReplay(t, first, postTo(h, "bad", "k2"))

	// Each failure leaves nothing; the retry runs the handler at once.
	for _, tc := range []struct {
		body   string
		status int
		typ    string
	}{
		{"fail", http.StatusServiceUnavailable, ""},
		{"broken", http.StatusServiceUnavailable, middleware.TypeCommitFailed},
	} {
		calls := k.calls.Load()
		rec := postTo(h, tc.body, "k-"+tc.body)
		if tc.typ != "" {
			wantProblem(t, rec, tc.status, tc.typ)
			if rec.Header().Get("Location") != "" || rec.Header().Get("Retry-After") == "" {
				t.Errorf("%s: the failure answer has headers %v", tc.body, rec.Header())
			}
		} else {
			wantStatus(t, rec, tc.status)
		}
		if n := k.invoices(t); n != 1 {
			t.Errorf("%s: %d invoices, want 1", tc.body, n)
		}
		postTo(h, tc.body, "k-"+tc.body)
		if got := k.calls.Load() - calls; got != 2 {
			t.Errorf("%s: the handler ran %d times for the request and its retry, want 2", tc.body, got)
		}
	}

	calls := k.calls.Load()
	if _, p := servePanic(h, newReq("POST", "/invoices", "panic", key("k-panic"))); p == nil {
		t.Fatal("the handler's panic did not propagate")
	}
	if n := k.invoices(t); n != 1 {
		t.Errorf("after a panic: %d invoices, want 1", n)
	}
	servePanic(h, newReq("POST", "/invoices", "panic", key("k-panic")))
	if got := k.calls.Load() - calls; got != 2 {
		t.Errorf("panic: the handler ran %d times for the request and its retry, want 2", got)
	}
}

// TestInTransactionDuplicates: a duplicate of a request whose transaction
// is open waits for it (in PostgreSQL) and replays its answer; with a wait
// too short, it is answered 409 with Retry-After.
func TestInTransactionDuplicates(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	release := make(chan struct{})
	inside := make(chan struct{}, 1)
	handler := k.gatedInvoice(inside, release)
	patient := middleware.New(k.Store, middleware.Options{InTransaction: true, Engine: engine.Options{Wait: 20 * time.Second}})(handler)
	hasty := middleware.New(k.Store, middleware.Options{InTransaction: true, Engine: engine.Options{Wait: 50 * time.Millisecond}})(handler)

	firstDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { firstDone <- postTo(patient, "", "k") }()
	<-inside
	rec := postTo(hasty, "", "k")
	wantProblem(t, rec, http.StatusConflict, middleware.TypeInFlight)
	if rec.Header().Get("Retry-After") == "" {
		t.Error("409 without Retry-After")
	}
	dupDone := make(chan *httptest.ResponseRecorder, 1)
	go func() { dupDone <- postTo(patient, "", "k") }()
	testdb.WaitLockWaiter(t, k.Pool, "idem_keys") // the duplicate is waiting
	close(release)
	first := <-firstDone
	wantStatus(t, first, http.StatusCreated)
	wantReplay(t, first, <-dupDone)
	if n, calls := k.invoices(t), k.calls.Load(); n != 1 || calls != 1 {
		t.Errorf("%d invoices and %d handler calls, want 1 and 1", n, calls)
	}
}

// TestInTransactionCommit: Commit with a nil record commits the claim's
// transaction and answers; a record function there is refused.
func TestInTransactionCommit(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	var useRecord atomic.Bool
	commitErr := make(chan error, 1)
	h := middleware.New(k.Store, middleware.Options{InTransaction: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id int64
		if err := pgstore.TxFrom(r.Context()).QueryRow(r.Context(), `INSERT INTO invoices (customer) VALUES ('acme') RETURNING id`).Scan(&id); err != nil {
			commitErr <- err
			return
		}
		var record middleware.RecordFunc
		if useRecord.Load() {
			record = func(context.Context, idem.Token, idem.Result) error { return nil }
		}
		commitErr <- middleware.Commit(w, r, http.StatusCreated, http.Header{"Content-Type": {"application/json"}}, fmt.Appendf(nil, `{"id":%d}`, id), record)
	}))
	first := postTo(h, "", "k1")
	if err := <-commitErr; err != nil {
		t.Fatal(err)
	}
	wantStatus(t, first, http.StatusCreated)
	wantReplay(t, first, postTo(h, "", "k1"))

	useRecord.Store(true)
	rec := postTo(h, "", "k2")
	if err := <-commitErr; !errors.Is(err, middleware.ErrRecordFunc) {
		t.Fatalf("Commit with a record function under InTransaction = %v, want ErrRecordFunc", err)
	}
	wantProblem(t, rec, http.StatusServiceUnavailable, middleware.TypeCommitFailed)
	if n := k.invoices(t); n != 1 {
		t.Errorf("%d invoices, want 1", n)
	}
}

// TestInTransactionBound: the work's deadline (MaxExecution) bounds the
// claim's transaction too. A handler that outlives it has its context
// ended, its next statement fails, and its 503 rolls everything back: no
// invoice, no claim, and the retry runs at once.
func TestInTransactionBound(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	h := middleware.New(k.Store, middleware.Options{InTransaction: true, Engine: engine.Options{MaxExecution: 300 * time.Millisecond}})(k.create(t, new(atomic.Pointer[httptest.ResponseRecorder])))
	began := time.Now()
	rec := postTo(h, "slow", "k")
	wantStatus(t, rec, http.StatusServiceUnavailable)
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("answered after %v", took)
	}
	if n := k.invoices(t); n != 0 {
		t.Errorf("%d invoices, want 0", n)
	}
	// Nothing was left behind, not even the fingerprint: a retry (here
	// one that does not dawdle) runs at once.
	wantStatus(t, postTo(h, "acme", "k"), http.StatusCreated)
	if n := k.invoices(t); n != 1 {
		t.Errorf("%d invoices after the retry, want 1", n)
	}
}

// TestInTransactionLargeResponse: a response larger than the record limit
// cannot be held back; the claim's transaction commits it as unreplayable
// when it outgrows the limit, and the rest streams.
func TestInTransactionLargeResponse(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	big := strings.Repeat("x", 4096)
	h := middleware.New(k.Store, middleware.Options{InTransaction: true, MaxRecordBytes: 1024})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := pgstore.TxFrom(r.Context()).Exec(r.Context(), `INSERT INTO invoices (customer) VALUES ('acme')`); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		for range 4 {
			_, _ = io.WriteString(w, big[:1024])
		}
	}))
	first := postTo(h, "", "k")
	if first.Code != http.StatusOK || first.Body.String() != big {
		t.Fatalf("first: %d, %d bytes", first.Code, first.Body.Len())
	}
	wantProblem(t, postTo(h, "", "k"), http.StatusGone, middleware.TypeUnreplayable)
	if n := k.invoices(t); n != 1 {
		t.Errorf("%d invoices, want 1", n)
	}
}

func TestInTransactionNeedsATxStore(t *testing.T) {
	t.Parallel()
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "InTransaction") {
			t.Errorf("panic %v, want one naming InTransaction", p)
		}
	}()
	middleware.New(memstore.New(memstore.Options{}), middleware.Options{InTransaction: true})
}

// TestInTransactionIdleBound: a claim in a transaction has no lease to
// renew or lose; its statements are its signs of life. A handler that runs
// past IdleInTransaction while it keeps working commits; one idle for
// longer loses its transaction to PostgreSQL, and its answer becomes 500
// TypeTransactionLimit.
func TestInTransactionIdleBound(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	const idle = 300 * time.Millisecond
	h := middleware.New(k.Store, middleware.Options{InTransaction: true, Engine: engine.Options{IdleInTransaction: idle}})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := pgstore.TxFrom(r.Context())
		body, _ := io.ReadAll(r.Body)
		if _, err := tx.Exec(r.Context(), `INSERT INTO invoices (customer) VALUES ($1)`, string(body)); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if string(body) == "busy" {
			// Busy for real durations: PostgreSQL's idle timeout
			// measures the gaps between statements.
			for end := time.Now().Add(3 * idle); time.Now().Before(end); time.Sleep(idle / 6) {
				if _, err := tx.Exec(r.Context(), `SELECT 1`); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
			}
		} else {
			// Idle for a real duration: PostgreSQL's
			// idle_in_transaction_session_timeout, not a clock a
			// synctest bubble fakes, ends the transaction.
			time.Sleep(3 * idle)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	wantStatus(t, postTo(h, "busy", "k1"), http.StatusCreated)
	wantProblem(t, postTo(h, "idle", "k2"), http.StatusInternalServerError, middleware.TypeTransactionLimit)
	if n := k.invoices(t); n != 1 {
		t.Errorf("%d invoices, want 1 (the busy one)", n)
	}
}

// clientWire is the client's end of a response: every status it is sent,
// with the Location header it carries and the invoices committed at that
// moment, and the body.
type clientWire struct {
	k       *txKit
	t       *testing.T
	header  http.Header
	sent    []sentStatus
	body    strings.Builder
	flushes int
}

type sentStatus struct {
	code        int
	location    string
	contentType string
	committed   int // invoices in the database when the status was sent
}

func (c *clientWire) Header() http.Header { return c.header }
func (c *clientWire) WriteHeader(code int) {
	c.sent = append(c.sent, sentStatus{code, c.header.Get("Location"), c.header.Get("Content-Type"), c.k.invoices(c.t)})
}
func (c *clientWire) Write(p []byte) (int, error) {
	if len(c.sent) == 0 {
		c.WriteHeader(http.StatusOK)
	}
	return c.body.Write(p)
}
func (c *clientWire) Flush() { c.flushes++ }

// TestInTransactionHoldsEverything: while the answer is held, nothing of
// the handler's reaches the client, in whatever order it calls the
// writer: not a second status (net/http tolerates one with a log line),
// not a status after a write, not an informational status, not a flush.
// When the commit then fails (here: a statement of the handler failed, so
// COMMIT rolls back), the client gets one answer, the 503, with none of
// the handler's headers; when it succeeds, one answer, the handler's first
// final status, sent once its invoice is committed. A handler that panics
// after writing sends nothing at all.
func TestInTransactionHoldsEverything(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	misbehaviours := map[string]func(w http.ResponseWriter, r *http.Request, id int64){
		"status twice": func(w http.ResponseWriter, r *http.Request, id int64) {
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
			http.Error(w, "and then an error", http.StatusInternalServerError)
		},
		"write then status": func(w http.ResponseWriter, r *http.Request, id int64) {
			_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
			w.WriteHeader(http.StatusCreated)
		},
		"flushes": func(w http.ResponseWriter, r *http.Request, id int64) {
			w.WriteHeader(http.StatusCreated)
			w.(http.Flusher).Flush()
			_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
			_ = http.NewResponseController(w).Flush()
		},
		"early hints": func(w http.ResponseWriter, r *http.Request, id int64) {
			w.Header().Add("Link", "</invoice.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
		},
		"commit": func(w http.ResponseWriter, r *http.Request, id int64) {
			_ = middleware.Commit(w, r, http.StatusCreated, nil, fmt.Appendf(nil, `{"id":%d}`, id), nil)
		},
		"panic after writing": func(w http.ResponseWriter, r *http.Request, id int64) {
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, `{"id":%d}`, id)
			w.WriteHeader(http.StatusInternalServerError)
			panic("after writing")
		},
	}
	for name, misbehave := range misbehaviours {
		for _, broken := range []bool{true, false} {
			h := middleware.New(k.Store, middleware.Options{InTransaction: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tx := pgstore.TxFrom(r.Context())
				var id int64
				if err := tx.QueryRow(r.Context(), `INSERT INTO invoices (customer) VALUES ('acme') RETURNING id`).Scan(&id); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
				if broken {
					_, _ = tx.Exec(r.Context(), `SELECT 1/0`) // ignored: COMMIT will roll back
				}
				w.Header().Set("Location", fmt.Sprintf("/invoices/%d", id))
				w.Header().Set("Content-Type", "application/json")
				misbehave(w, r, id)
			}))
			before := k.invoices(t)
			client := &clientWire{k: k, t: t, header: http.Header{}}
			func() {
				defer func() { _ = recover() }()
				h.ServeHTTP(client, newReq("POST", "/invoices", "", key(fmt.Sprintf("%s-%v", name, broken))))
			}()
			after := k.invoices(t)
			switch {
			case name == "panic after writing":
				if len(client.sent) > 0 || client.body.Len() > 0 || after != before {
					t.Errorf("%s (broken %v): the client was sent %+v %q; %d invoices committed; want nothing sent, nothing committed",
						name, broken, client.sent, client.body.String(), after-before)
				}
			case broken:
				if len(client.sent) != 1 || client.sent[0].code != http.StatusServiceUnavailable || client.sent[0].location != "" ||
					!strings.Contains(client.body.String(), middleware.TypeCommitFailed) || after != before {
					t.Errorf("%s, the commit failing: the client was sent %+v, body %q; %d invoices committed; want only a 503 commit_failed without Location, nothing committed",
						name, client.sent, client.body.String(), after-before)
				}
			default:
				want := http.StatusCreated
				if name == "write then status" {
					want = http.StatusOK // the first write implied it, as in net/http
				}
				if len(client.sent) != 1 || client.sent[0].code != want || client.sent[0].committed != before+1 || after != before+1 ||
					client.sent[0].contentType != "application/json" {
					t.Errorf("%s, the commit succeeding: the client was sent %+v (invoices before: %d), %d invoices committed; want one status %d, sent after its invoice committed, with the headers as they were at the status (application/json: what http.Error sets after it does not count, as in net/http)",
						name, client.sent, before, after-before, want)
				}
			}
			if client.flushes > 0 && len(client.sent) > 0 && client.sent[0].committed == before {
				t.Errorf("%s (broken %v): flushed before the commit", name, broken)
			}
		}
	}
}

// TestInTransactionFailedSpillOnce: a response that outgrows the record
// limit on a transaction that cannot commit fails its early commit once:
// one commit attempt, one warning, whatever the handler writes after it,
// and the client gets the 503 alone.
func TestInTransactionFailedSpillOnce(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	var logs strings.Builder // written on the request's goroutine only: no lease to renew in a transaction
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h := middleware.New(k.Store, middleware.Options{InTransaction: true, MaxRecordBytes: 100, Engine: engine.Options{Logger: logger}})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = pgstore.TxFrom(r.Context()).Exec(r.Context(), `SELECT 1/0`) // ignored: COMMIT will roll back
		for range 200 {
			_, _ = io.WriteString(w, strings.Repeat("x", 50))
		}
	}))
	rec := postTo(h, "", "k")
	wantProblem(t, rec, http.StatusServiceUnavailable, middleware.TypeCommitFailed)
	if n := strings.Count(logs.String(), "did not commit"); n != 1 {
		t.Errorf("%d warnings that the transaction did not commit, want 1:\n%s", n, logs.String())
	}
}

// txStoreStub is an idem.TxStore for construction tests: New never
// claims.
type txStoreStub struct{ *memstore.Store }

func (txStoreStub) BeginClaim(context.Context, idem.ClaimRequest, idem.TxLimits) (idem.Claim, idem.TxClaim, error) {
	return idem.Claim{}, nil, errors.New("stub")
}

// TestInTransactionRefusesWhatCannotWork: New refuses, naming the options,
// the combinations with InTransaction that cannot keep its promise: a
// record policy that does not record a success or a redirect (the
// rollback would take the rows of an answer the client is told
// succeeded), FailOpen and KeyOptional (the handler would run without the
// transaction it writes in).
func TestInTransactionRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	store := txStoreStub{memstore.New(memstore.Options{})}
	for name, tc := range map[string]struct {
		opts middleware.Options
		want string
	}{
		"202 not recorded": {middleware.Options{RecordPolicy: func(s int) bool { return s != http.StatusAccepted }}, "RecordPolicy"},
		"303 not recorded": {middleware.Options{RecordPolicy: func(s int) bool { return s < 300 || s >= 400 }}, "RecordPolicy"},
		"FailOpen":         {middleware.Options{FailOpen: true}, "FailOpen"},
		"KeyOptional":      {middleware.Options{KeyOptional: true}, "KeyOptional"},
	} {
		func() {
			defer func() {
				p := recover()
				if msg := fmt.Sprint(p); p == nil || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "InTransaction") {
					t.Errorf("%s: New panicked with %v, want a message naming %s and InTransaction", name, p, tc.want)
				}
			}()
			tc.opts.InTransaction = true
			middleware.New(store, tc.opts)
		}()
	}
	// What works: the default policy, one that records more, and one
	// that leaves out a failure.
	for _, policy := range []middleware.RecordPolicy{nil, func(int) bool { return true }, func(s int) bool { return s != http.StatusConflict }} {
		middleware.New(store, middleware.Options{InTransaction: true, RecordPolicy: policy})
	}
}

// TestInTransactionCommitOutcomeUnknown: when the connection is lost
// around the COMMIT (here its backend is terminated after the handler's
// last statement), the middleware cannot know whether the transaction
// committed: the 503 says so, and never that the request took no effect.
func TestInTransactionCommitOutcomeUnknown(t *testing.T) {
	t.Parallel()
	k := newTxKit(t)
	h := middleware.New(k.Store, middleware.Options{InTransaction: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := pgstore.TxFrom(r.Context())
		var pid int
		if err := tx.QueryRow(r.Context(), `INSERT INTO invoices (customer) VALUES ('acme') RETURNING pg_backend_pid()`).Scan(&pid); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if _, err := k.Pool.Exec(r.Context(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	p := wantProblem(t, postTo(h, "", "k"), http.StatusServiceUnavailable, middleware.TypeCommitFailed)
	detail := fmt.Sprint(p["detail"])
	if strings.Contains(detail, "no effect") || !strings.Contains(detail, "unknown") || !strings.Contains(detail, "same key") {
		t.Errorf("detail %q: want it to say the outcome is unknown and to retry with the same key, never that nothing took effect", detail)
	}
}
