package middleware_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/middleware"
)

// suiteStore runs the suite's tests of a store that fails: refuse, or fail
// open.
func suiteStore(t *testing.T, newStore newKit) {
	t.Run("StoreOutage", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{Engine: engine.Options{RetryAfter: 7 * time.Second}}, nil)
		wantStatus(t, serve(f.h, newReq("POST", "/a", `{}`, key("before"))), http.StatusCreated)
		f.kit.breakStore()
		for _, k := range []string{"before", "after"} {
			rec := serve(f.h, newReq("POST", "/a", `{}`, key(k)))
			wantProblem(t, rec, http.StatusServiceUnavailable, middleware.TypeStoreUnavailable)
			if got := rec.Header().Get("Retry-After"); got != "7" {
				t.Fatalf("Retry-After = %q, want 7", got)
			}
		}
		wantCalls(t, f, 1)
	})

	t.Run("StoreOutageFailOpen", func(t *testing.T) {
		t.Parallel()
		var events idemtest.Events
		f := setup(t, newStore, middleware.Options{FailOpen: true, Observer: events.ObserveHTTP}, nil)
		f.kit.breakStore()
		wantStatus(t, serve(f.h, newReq("POST", "/a", `{"x":1}`, key("k"))), http.StatusCreated)
		rec := serve(f.h, newReq("POST", "/a", `{"x":1}`, key("k")))
		wantStatus(t, rec, http.StatusCreated)
		if !strings.Contains(rec.Body.String(), `"got":"{\"x\":1}"`) {
			t.Fatalf("fail-open handler did not get the body: %s", rec.Body)
		}
		wantCalls(t, f, 2) // unsafe, as documented
		if events.Count(idem.EventStoreError) != 2 {
			t.Fatalf("events %v, want two store errors", events.Kinds())
		}
	})
}
