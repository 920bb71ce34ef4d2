package mcphttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// TestClaimStoresLabels: the row of a call's claim carries its method, its
// tool as the route and the principal as its caller.
func TestClaimStoresLabels(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	var seen idem.Event
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`))
	})
	h := mcphttp.New(store, mcphttp.Options{
		Principal: func(*http.Request) string { return "agent-9" },
		Observer: func(_ *http.Request, e idem.Event) {
			if e.Kind == idem.EventClaimed {
				seen = e
			}
		},
	})(inner)
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(callBody(1, "refund", map[string]any{"amount": 5}, map[string]any{"idempotencyKey": "pay-1"})))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	want := idem.Labels{Method: "tools/call", Route: "refund", Caller: "agent-9"}
	if e, ok := store.Lookup(seen.Scope, seen.Key); !ok || e.Labels != want {
		t.Fatalf("labels %+v (present %v), want %+v", e.Labels, ok, want)
	}
}
