package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Main(m))
}

func TestMemstore(t *testing.T) {
	t.Parallel()
	runSuite(t, func(t *testing.T) storeKit {
		s := &breakable{Store: memstore.New(memstore.Options{})}
		return storeKit{store: s, breakStore: func() { s.broken.Store(true) }}
	})
}

// breakable fails every call, once broken, as an unreachable store does.
type breakable struct {
	idem.Store
	broken atomic.Bool
}

func (s *breakable) err(op string) error {
	if s.broken.Load() {
		return &idem.UnavailableError{Op: op, Err: errors.New("connection refused")}
	}
	return nil
}

func (s *breakable) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := s.err("claim"); err != nil {
		return idem.Claim{}, err
	}
	return s.Store.Claim(ctx, req)
}

func (s *breakable) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	if err := s.err("complete"); err != nil {
		return err
	}
	return s.Store.Complete(ctx, tok, res)
}

func (s *breakable) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	if err := s.err("renew"); err != nil {
		return time.Time{}, err
	}
	return s.Store.Renew(ctx, tok, lease)
}

func (s *breakable) Release(ctx context.Context, tok idem.Token) error {
	if err := s.err("release"); err != nil {
		return err
	}
	return s.Store.Release(ctx, tok)
}

func (s *breakable) Wait(ctx context.Context, scope string, key idem.Key) error {
	if err := s.err("wait"); err != nil {
		return err
	}
	return s.Store.Wait(ctx, scope, key)
}

func TestStoreFull(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{Capacity: 1})
	release := make(chan struct{})
	running := make(chan struct{})
	h := middleware.New(store, middleware.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(running)
		<-release
	}))
	done := make(chan struct{})
	go func() { defer close(done); serve(h, newReq("POST", "/a", `{}`, key("one"))) }()
	<-running
	rec := serve(h, newReq("POST", "/a", `{}`, key("two")))
	close(release)
	<-done
	wantProblem(t, rec, http.StatusServiceUnavailable, middleware.TypeStoreUnavailable)
	wantRetryAfter(t, rec, 1)
}

func TestStoreRetryAfterHint(t *testing.T) {
	t.Parallel()
	s := &hinting{Store: memstore.New(memstore.Options{})}
	h := middleware.New(s, middleware.Options{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("handler ran without a claim")
	}))
	rec := serve(h, newReq("POST", "/a", `{}`, key("k")))
	wantProblem(t, rec, http.StatusServiceUnavailable, middleware.TypeStoreUnavailable)
	if got := rec.Header().Get("Retry-After"); got != "3" {
		t.Fatalf("Retry-After = %q, want the store's hint 3", got)
	}
}

type hinting struct{ idem.Store }

func (hinting) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, &idem.UnavailableError{Op: "claim", Err: errors.New("pool exhausted"), RetryAfter: 2500 * time.Millisecond}
}

// A renewal that cannot reach the store until the lease has run out stops
// the handler: without a confirmed claim it must not go on.
func TestRenewalOutageCancelsHandler(t *testing.T) {
	t.Parallel()
	s := &breakable{Store: memstore.New(memstore.Options{})}
	var events idemtest.Events
	running := make(chan struct{})
	cause := make(chan error, 1)
	h := middleware.New(s, middleware.Options{Engine: engine.Options{Lease: 150 * time.Millisecond}, Observer: events.ObserveHTTP})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			close(running)
			<-r.Context().Done()
			cause <- context.Cause(r.Context())
		}))
	done := make(chan struct{})
	go func() { defer close(done); serve(h, newReq("POST", "/a", `{}`, key("k"))) }()
	<-running
	s.broken.Store(true)
	if err := <-cause; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", err)
	}
	<-done
	if events.Count(idem.EventLeaseLost) != 1 || events.Count(idem.EventStoreError) < 1 {
		t.Fatalf("events %v, want renew store errors then one lease lost", events.Kinds())
	}
}

func TestNewPanics(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	for name, opts := range map[string]middleware.Options{
		"empty methods":         {Methods: []string{}},
		"empty method":          {Methods: []string{""}},
		"negative body limit":   {MaxBodyBytes: -1},
		"negative record":       {MaxRecordBytes: -1},
		"negative lease":        {Engine: engine.Options{Lease: -time.Second}},
		"negative timeout":      {Engine: engine.Options{StoreTimeout: -time.Second}},
		"negative retry after":  {Engine: engine.Options{RetryAfter: -time.Second}},
		"records Set-Cookie":    {RecordHeaders: []string{"set-cookie"}},
		"records Authorization": {RecordHeaders: []string{"Authorization"}},
		"records hop-by-hop":    {RecordHeaders: []string{"Transfer-Encoding"}},
		"records empty name":    {RecordHeaders: []string{""}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: New did not panic", name)
				}
			}()
			middleware.New(store, opts)
		}()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("New(nil store) did not panic")
			}
		}()
		middleware.New(nil, middleware.Options{})
	}()
}

// An informational response (103 Early Hints) is sent, but the final status
// is what is recorded.
func TestInformationalNotRecorded(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	h := middleware.New(memstore.New(memstore.Options{}), middleware.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte("accepted"))
	}))
	// (httptest.ResponseRecorder reports the 103 as the first's Code.)
	serve(h, newReq("POST", "/a", `{}`, key("k")))
	replay := serve(h, newReq("POST", "/a", `{}`, key("k")))
	wantStatus(t, replay, http.StatusAccepted)
	if replay.Body.String() != "accepted" || replay.Header().Get("Link") == "" || calls.Load() != 1 {
		t.Fatalf("replay %d %v %q after %d runs", replay.Code, replay.Header(), replay.Body, calls.Load())
	}
}

// A client that floods the store with new keys (even ones answered 400) does
// not flush another client's recorded result: the store refuses new keys
// with 503 and Retry-After, and the other client's retry is still a replay.
func TestStoreFullKeepsResults(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{Capacity: 4})
	var runs atomic.Int64
	h := middleware.New(store, middleware.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if r.Header.Get("Authorization") == "Bearer mallory" {
			w.WriteHeader(http.StatusBadRequest) // recorded, like any 4xx
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	alice := func() *http.Request {
		return newReq("POST", "/pay", `{}`, hdr("Authorization", "Bearer alice"), key("alice-1"))
	}
	if rec := serve(h, alice()); rec.Code != http.StatusCreated {
		t.Fatalf("alice: %d", rec.Code)
	}
	refused := 0
	for i := range 20 {
		rec := serve(h, newReq("POST", "/pay", `{}`, hdr("Authorization", "Bearer mallory"), key(fmt.Sprint("flood-", i))))
		if rec.Code == http.StatusServiceUnavailable {
			wantProblem(t, rec, http.StatusServiceUnavailable, middleware.TypeStoreUnavailable)
			wantRetryAfter(t, rec, 60)
			refused++
		}
	}
	if refused != 17 {
		t.Errorf("%d of 20 flooding keys refused, want 17 (capacity 4, alice's result kept)", refused)
	}
	rec := serve(h, alice())
	if rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("alice's retry after the flood: %d, replayed %q; want her recorded 201", rec.Code, rec.Header().Get("Idempotent-Replayed"))
	}
	if n := runs.Load(); n != 4 {
		t.Errorf("handler ran %d times, want 4 (alice once, three flooding keys)", n)
	}
}
