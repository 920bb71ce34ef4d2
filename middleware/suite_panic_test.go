package middleware_test

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/middleware"
)

// suitePanic runs the suite's tests of a handler that panics.
func suitePanic(t *testing.T, newStore newKit) {
	t.Run("Panic", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				if f.calls.Add(1) == 1 {
					w.WriteHeader(http.StatusCreated) // half an answer
					panic("boom")
				}
				createHandler(&fixture{})(w, r)
			}
		})
		if _, p := servePanic(f.h, newReq("POST", "/a", `{}`, key("k"))); p != "boom" {
			t.Fatalf("panic = %v, want the handler's panic re-raised", p)
		}
		rec := serve(f.h, newReq("POST", "/a", `{}`, key("k")))
		wantStatus(t, rec, http.StatusCreated)
		if rec.Header().Get("Idempotent-Replayed") != "" {
			t.Fatal("the retry of a panicked request got a replay")
		}
		wantCalls(t, f, 2)
		// The claim the panic released is not left behind: a retry now
		// replays the second run.
		wantReplay(t, rec, serve(f.h, newReq("POST", "/a", `{}`, key("k"))))
	})

	t.Run("AbortHandlerPanic", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				if f.calls.Add(1) == 1 {
					panic(http.ErrAbortHandler)
				}
			}
		})
		if _, p := servePanic(f.h, newReq("POST", "/a", `{}`, key("k"))); p != http.ErrAbortHandler {
			t.Fatalf("panic = %v, want http.ErrAbortHandler", p)
		}
		wantStatus(t, serve(f.h, newReq("POST", "/a", `{}`, key("k"))), http.StatusOK)
		wantCalls(t, f, 2)
	})
}
