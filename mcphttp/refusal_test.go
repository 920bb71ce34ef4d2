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

// TestRefusalsReported: every call the wrapper answers itself instead of
// the tool, and every call it lets run without deduplication, is reported
// with its reason; a refusal's message names what is wrong in the key, not
// a Go package.
func TestRefusalsReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, session string
		cookie              bool
		want                idem.Event
		message             string
	}{
		{"invalid key", callBody(1, "refund", nil, map[string]any{"idempotencyKey": ""}), "", false,
			idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedInvalidKey, Status: http.StatusOK}, `"message":"invalid _meta.idempotencyKey: empty"`},
		{"unscoped cookies", callBody(1, "refund", nil, map[string]any{"idempotencyKey": "k"}), "", true,
			idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedUnscopedCookies, Status: http.StatusOK}, `"reason":"unscoped_cookies"`},
		{"unsupported id", `{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"refund","_meta":{"idempotencyKey":"k"}}}`, "", false,
			idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedInvalidRequest, Status: http.StatusBadRequest}, `"reason":"unsupported_id"`},
		{"no key, no session", callBody(1, "refund", nil, nil), "", false,
			idem.Event{Kind: idem.EventUnprotected, Reason: idem.UnprotectedNoKey}, `"result"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var events []idem.Event
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`))
			})
			h := mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{
				Observer: func(_ *http.Request, e idem.Event) { events = append(events, e) },
			})(inner)
			req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.cookie {
				req.Header.Set("Cookie", "sid=1")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if !strings.Contains(rec.Body.String(), tc.message) {
				t.Errorf("answer %s, want %s in it", rec.Body, tc.message)
			}
			tc.want.Adapter = mcphttp.AdapterName
			if len(events) != 1 || events[0].Kind != tc.want.Kind || events[0].Reason != tc.want.Reason ||
				events[0].Status != tc.want.Status || events[0].Adapter != tc.want.Adapter {
				t.Fatalf("events %+v, want one %+v", events, tc.want)
			}
		})
	}
}
