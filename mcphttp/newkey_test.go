package mcphttp_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/mcphttp"
)

// TestNewKeyGuard: an agent that mints a new key for every retry sends the
// same call (caller, tool, canonical arguments) under key A, then key B.
// With the guard on, the second is reported (idem.EventKeyRotated) and
// handled as its Action says: Report runs it (two runs, as without the
// guard), Refuse answers -32602 with data.type idempotency_key_rotated
// (one run), AsRetry answers with the first call's result (one run). Another
// caller, or other arguments, under a new key are new calls. Without the
// guard nothing is reported.
func TestNewKeyGuard(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		guard *mcphttp.NewKeyGuard
		runs  int // of the tool for A then B
	}{
		{"off", nil, 2},
		{"report", &mcphttp.NewKeyGuard{}, 2},
		{"refuse", &mcphttp.NewKeyGuard{Action: mcphttp.NewKeyRefuse}, 1},
		{"as retry", &mcphttp.NewKeyGuard{Action: mcphttp.NewKeyAsRetry}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var events idemtest.Events
			h := newHarness(t, harnessOptions{wrap: mcphttp.Options{NewKeyGuard: c.guard, Observer: events.ObserveHTTP}})
			session := h.initialize(t)
			alice := http.Header{"Authorization": {"Bearer alice"}}
			call := func(id int, text, key string, who http.Header) rpcMessage {
				msgs := readMessages(t, h.post(t, session, callBody(id, "echo", map[string]any{"text": text}, map[string]any{"idempotencyKey": key}), who))
				if len(msgs) != 1 {
					t.Fatalf("got %+v", msgs)
				}
				return msgs[0]
			}
			first := call(1, "invoice", "key-A", alice)
			second := call(2, "invoice", "key-B", alice)
			if n := h.runs.get("echo:invoice"); n != c.runs {
				t.Errorf("the tool ran %d times for the call under two keys, want %d", n, c.runs)
			}
			rotated := 1
			switch {
			case c.guard == nil:
				rotated = 0
				fallthrough
			case c.guard.Action == mcphttp.NewKeyReport:
				if second.Error != nil || second.text() == first.text() {
					t.Errorf("second key got %s, want a run of its own", second.raw)
				}
			case c.guard.Action == mcphttp.NewKeyRefuse:
				if e := second.Error; e == nil || e.Code != mcphttp.CodeInvalidParams || e.Data.Type != mcphttp.TypeKeyRotated || !strings.Contains(e.Message, "another idempotency key") {
					t.Errorf("second key got %s, want -32602 with data.type %s", second.raw, mcphttp.TypeKeyRotated)
				}
			case c.guard.Action == mcphttp.NewKeyAsRetry:
				if second.text() != first.text() || !second.replayed() {
					t.Errorf("second key got %s, want the first call's result %s replayed", second.raw, first.raw)
				}
			}
			// Another caller, and other arguments, under new keys: new calls.
			call(3, "invoice", "key-C", http.Header{"Authorization": {"Bearer bob"}})
			call(4, "other invoice", "key-D", alice)
			if n := h.runs.get("echo:invoice") + h.runs.get("echo:other invoice"); n != c.runs+2 {
				t.Errorf("new calls ran %d times in all, want %d", n, c.runs+2)
			}
			if n := events.Count(idem.EventKeyRotated); n != rotated {
				t.Errorf("%d EventKeyRotated, want %d", n, rotated)
			}
		})
	}
}
