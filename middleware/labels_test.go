package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// TestClaimStoresLabels: the row of a claim carries the request's method,
// the route that matched it (its path outside a ServeMux route) and the
// principal as its caller, never a credential.
func TestClaimStoresLabels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		principal func(*http.Request) string
		mux       bool
		want      idem.Labels
	}{
		{"route and principal", func(r *http.Request) string { return "acct-7" }, true,
			idem.Labels{Method: "POST", Route: "POST /payments/{id}", Caller: "acct-7"}},
		{"path, no principal", nil, false, idem.Labels{Method: "POST", Route: "/payments/p%2F1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memstore.New(memstore.Options{})
			var seen idem.Event
			protect := middleware.New(store, middleware.Options{Principal: tc.principal,
				Observer: func(_ *http.Request, e idem.Event) { seen = e }})
			ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
			var h http.Handler = protect(ok)
			if tc.mux {
				mux := http.NewServeMux()
				mux.Handle("POST /payments/{id}", h)
				h = mux
			}
			req := httptest.NewRequest(http.MethodPost, "/payments/p%2F1", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", "pay-1")
			req.Header.Set("Authorization", "Bearer secret-token")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				t.Fatalf("status %d", rec.Code)
			}
			e, ok2 := store.Lookup(seen.Scope, seen.Key)
			if !ok2 || e.Labels != tc.want {
				t.Fatalf("labels %+v (present %v), want %+v", e.Labels, ok2, tc.want)
			}
		})
	}
}
