package middleware_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/middleware"
)

// suiteScope runs the suite's tests of scopes and fingerprints: one key in
// two scopes, mismatches.
func suiteScope(t *testing.T, newStore newKit) {
	t.Run("TwoScopesOneKey", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		for _, opts := range [][]reqOpt{
			{hdr("Authorization", "Bearer alice")},
			{hdr("Authorization", "Bearer bob")},
			{hdr("X-Api-Key", "carol")},
			{hdr("Authorization", "Bearer alice"), hdr("X-Session-Id", "s2")},
		} {
			rec := serve(f.h, newReq("POST", "/invoices", `{}`, append(opts, key("shared"))...))
			wantStatus(t, rec, http.StatusCreated)
			if rec.Header().Get("Idempotent-Replayed") != "" {
				t.Fatal("a request in another scope got a replay")
			}
		}
		// Another route is another scope, too.
		wantStatus(t, serve(f.h, newReq("POST", "/payments", `{}`, hdr("Authorization", "Bearer alice"), key("shared"))), http.StatusCreated)
		wantCalls(t, f, 5)
		// Within a scope, the key still replays.
		rec := serve(f.h, newReq("POST", "/invoices", `{}`, hdr("Authorization", "Bearer bob"), key("shared")))
		if rec.Header().Get("Idempotent-Replayed") != "true" || !strings.Contains(rec.Body.String(), `"run":2`) {
			t.Fatalf("bob's retry got %s, want his own run 2, replayed", rec.Body)
		}
	})

	t.Run("ScopeFunc", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{Scope: func(r *http.Request) string { return r.Header.Get("X-Tenant") }}, nil)
		serve(f.h, newReq("POST", "/a", `{}`, hdr("X-Tenant", "t1"), key("k")))
		serve(f.h, newReq("POST", "/a", `{}`, hdr("X-Tenant", "t2"), key("k")))
		// Same tenant with another credential: one scope by this ScopeFunc.
		rec := serve(f.h, newReq("POST", "/a", `{}`, hdr("X-Tenant", "t1"), hdr("Authorization", "x"), key("k")))
		wantStatus(t, rec, http.StatusCreated)
		if rec.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatal("custom scope ignored")
		}
		wantCalls(t, f, 2)
	})

	t.Run("ScopeByServeMuxPattern", func(t *testing.T) {
		t.Parallel()
		f := &fixture{kit: newStore(t)}
		mux := http.NewServeMux()
		mux.Handle("POST /invoices/{id}/pay", middleware.New(f.kit.store, middleware.Options{})(createHandler(f)))
		wantStatus(t, serve(mux, newReq("POST", "/invoices/1/pay", `{}`, key("k"))), http.StatusCreated)
		// One route, one scope: the key reused on another invoice is a
		// different request, not a second payment.
		wantProblem(t, serve(mux, newReq("POST", "/invoices/2/pay", `{}`, key("k"))), http.StatusUnprocessableEntity, middleware.TypeMismatch)
		wantCalls(t, f, 1)
	})

	t.Run("Mismatch", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		wantStatus(t, serve(f.h, newReq("POST", "/invoices?x=1", `{"amount":1}`, key("k"))), http.StatusCreated)
		for name, r := range map[string]*http.Request{
			"body":         newReq("POST", "/invoices?x=1", `{"amount":2}`, key("k")),
			"query":        newReq("POST", "/invoices?x=2", `{"amount":1}`, key("k")),
			"content type": newReq("POST", "/invoices?x=1", `{"amount":1}`, key("k"), hdr("Content-Type", "text/plain")),
		} {
			r.Header.Set("Content-Type", r.Header.Values("Content-Type")[len(r.Header.Values("Content-Type"))-1])
			rec := serve(f.h, r)
			if rec.Code != http.StatusUnprocessableEntity {
				t.Errorf("%s differs: status %d, want 422", name, rec.Code)
				continue
			}
			wantProblem(t, rec, http.StatusUnprocessableEntity, middleware.TypeMismatch)
		}
		wantCalls(t, f, 1)
	})

	t.Run("MismatchWhileInFlight", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		running := make(chan struct{})
		f := setup(t, newStore, middleware.Options{}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				f.calls.Add(1)
				close(running)
				<-release
			}
		})
		done := make(chan struct{})
		go func() { defer close(done); serve(f.h, newReq("POST", "/a", `1`, key("k"))) }()
		<-running
		rec := serve(f.h, newReq("POST", "/a", `2`, key("k")))
		close(release)
		<-done
		wantProblem(t, rec, http.StatusUnprocessableEntity, middleware.TypeMismatch)
		wantCalls(t, f, 1)
	})

	t.Run("FingerprintFunc", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{Fingerprint: func(r *http.Request, body []byte) string { return r.URL.Path }}, nil)
		first := serve(f.h, newReq("POST", "/a", `1`, key("k")))
		// A different body does not count for this fingerprint: replay.
		wantReplay(t, first, serve(f.h, newReq("POST", "/a", `2`, key("k"))))
	})
}
