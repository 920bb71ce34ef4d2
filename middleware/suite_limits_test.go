package middleware_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/middleware"
)

// suiteLimits runs the suite's tests of recording limits: a response or a
// request body over its limit.
func suiteLimits(t *testing.T, newStore newKit) {
	t.Run("ResponseOverRecordLimit", func(t *testing.T) {
		t.Parallel()
		big := strings.Repeat("x", 100)
		f := setup(t, newStore, middleware.Options{MaxRecordBytes: 64}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				f.calls.Add(1)
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, big[:50])
				io.WriteString(w, big[50:])
			}
		})
		first := serve(f.h, newReq("POST", "/a", `{}`, key("k")))
		wantStatus(t, first, http.StatusCreated)
		if first.Body.String() != big {
			t.Fatal("the over-limit response did not reach the client in full")
		}
		for range 2 {
			p := wantProblem(t, serve(f.h, newReq("POST", "/a", `{}`, key("k"))), http.StatusGone, middleware.TypeUnreplayable)
			if p["original_status"] != float64(http.StatusCreated) {
				t.Fatalf("original_status = %v, want 201", p["original_status"])
			}
		}
		wantCalls(t, f, 1)
		// Exactly at the limit is recorded.
		g := setup(t, newStore, middleware.Options{MaxRecordBytes: 100}, func(*fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) }
		})
		orig := serve(g.h, newReq("POST", "/a", `{}`, key("k")))
		wantReplay(t, orig, serve(g.h, newReq("POST", "/a", `{}`, key("k"))))
	})

	t.Run("RequestBodyOverLimit", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{MaxBodyBytes: 10}, nil)
		rec := serve(f.h, newReq("POST", "/a", `{"too":"long"}`, key("k")))
		wantProblem(t, rec, http.StatusRequestEntityTooLarge, middleware.TypeBodyTooLarge)
		// Without a Content-Length (chunked), the limit holds as well.
		r := newReq("POST", "/a", ``, key("k"))
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(`{"too":"long"}`)), -1
		wantProblem(t, serve(f.h, r), http.StatusRequestEntityTooLarge, middleware.TypeBodyTooLarge)
		wantCalls(t, f, 0)
		// At the limit, chunked: the handler sees the whole body.
		r = newReq("POST", "/a", ``, key("k"))
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(`0123456789`)), -1
		rec = serve(f.h, r)
		wantStatus(t, rec, http.StatusCreated)
		if !strings.Contains(rec.Body.String(), `"got":"0123456789"`) {
			t.Fatalf("handler saw %s", rec.Body)
		}
	})
}
