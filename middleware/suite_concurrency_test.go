package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/middleware"
)

// suiteConcurrency runs the suite's tests of duplicates in flight: refused,
// waited for, a hundred at once.
func suiteConcurrency(t *testing.T, newStore newKit) {
	t.Run("InFlight409", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		running := make(chan struct{})
		f := setup(t, newStore, middleware.Options{Engine: engine.Options{Wait: -1}}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				if f.calls.Add(1) == 1 {
					close(running)
					<-release
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "done")
			}
		})
		var first *httptest.ResponseRecorder
		done := make(chan struct{})
		go func() { defer close(done); first = serve(f.h, newReq("POST", "/a", `{}`, key("k"))) }()
		<-running
		rec := serve(f.h, newReq("POST", "/a", `{}`, key("k")))
		wantProblem(t, rec, http.StatusConflict, middleware.TypeInFlight)
		wantRetryAfter(t, rec, int(idem.DefaultLease/time.Second))
		close(release)
		<-done
		wantReplay(t, first, serve(f.h, newReq("POST", "/a", `{}`, key("k"))))
		wantCalls(t, f, 1)
	})

	t.Run("InFlightWaitsForResult", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		running := make(chan struct{})
		f := setup(t, newStore, middleware.Options{Engine: engine.Options{Wait: time.Minute}}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				f.calls.Add(1)
				close(running)
				<-release
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "done")
			}
		})
		var first *httptest.ResponseRecorder
		done := make(chan struct{})
		go func() { defer close(done); first = serve(f.h, newReq("POST", "/a", `{}`, key("k"))) }()
		<-running
		dup := make(chan *httptest.ResponseRecorder)
		go func() { dup <- serve(f.h, newReq("POST", "/a", `{}`, key("k"))) }()
		close(release)
		<-done
		wantReplay(t, first, <-dup)
		wantCalls(t, f, 1)
	})

	t.Run("Concurrent100", func(t *testing.T) {
		t.Parallel()
		const n = 100
		var arrived atomic.Int64
		allArrived := make(chan struct{})
		f := setup(t, newStore, middleware.Options{}, func(f *fixture) http.HandlerFunc {
			h := createHandler(f)
			return func(w http.ResponseWriter, r *http.Request) {
				// Hold the original until every request was sent, so
				// the others meet it in flight or completed.
				<-allArrived
				h(w, r)
			}
		})
		recs := make([]*httptest.ResponseRecorder, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if arrived.Add(1) == n {
					close(allArrived)
				}
				recs[i] = serve(f.h, newReq("POST", "/invoices", `{"amount":100}`, key("same")))
			})
		}
		wg.Wait()
		wantCalls(t, f, 1)
		var orig *httptest.ResponseRecorder
		for _, rec := range recs {
			if rec.Code == http.StatusCreated && rec.Header().Get("Idempotent-Replayed") == "" {
				if orig != nil {
					t.Fatal("two responses without the replay marker")
				}
				orig = rec
			}
		}
		if orig == nil {
			t.Fatal("no original response")
		}
		replays, conflicts := 0, 0
		for _, rec := range recs {
			switch {
			case rec == orig:
			case rec.Code == http.StatusConflict:
				wantProblem(t, rec, http.StatusConflict, middleware.TypeInFlight)
				conflicts++
			default:
				wantReplay(t, orig, rec)
				replays++
			}
		}
		t.Logf("1 original, %d replays, %d conflicts", replays, conflicts)
	})
}
