package mcphttp_test

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/mcphttp"
)

// TestCookieCallersScopes: callers who authenticate by session cookie and
// send one _meta.idempotencyKey with the same arguments. Before
// SessionCookies existed, the scope hashed only Authorization and X-Api-Key,
// so every cookie caller shared one scope and bob got alice's result.
func TestCookieCallersScopes(t *testing.T) {
	t.Parallel()
	meta := map[string]any{"idempotencyKey": "same-key"}
	args := map[string]any{"text": "c"}
	call := func(t *testing.T, h *harness, session string, id int, cookie string) rpcMessage {
		t.Helper()
		msgs := readMessages(t, h.post(t, session, callBody(id, "echo", args, meta), http.Header{"Cookie": {cookie}}))
		if len(msgs) != 1 {
			t.Fatalf("%s: %+v", cookie, msgs)
		}
		return msgs[0]
	}
	t.Run("default refuses what it cannot scope", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOptions{})
		a := call(t, h, h.initialize(t), 1, "session=alice")
		b := call(t, h, h.initialize(t), 2, "session=bob")
		if a.Result != nil && b.Result != nil && a.text() == b.text() {
			t.Fatalf("bob got alice's result %q", a.text())
		}
		for _, m := range []rpcMessage{a, b} {
			if m.Error == nil || m.Error.Code != mcphttp.CodeInternalError || m.Error.Data.Reason != mcphttp.ReasonUnscopedCookies {
				t.Errorf("got %s, want code %d reason %s", m.raw, mcphttp.CodeInternalError, mcphttp.ReasonUnscopedCookies)
			}
		}
		if n := h.runs.get("echo:c"); n != 0 {
			t.Errorf("tool ran %d times for callers it cannot tell apart", n)
		}
	})
	t.Run("named session cookie", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOptions{wrap: mcphttp.Options{SessionCookies: []string{"session"}}})
		sa, sb := h.initialize(t), h.initialize(t)
		a := call(t, h, sa, 1, "session=alice; theme=dark")
		b := call(t, h, sb, 2, "session=bob")
		again := call(t, h, sa, 3, "session=alice; theme=light")
		if a.text() == "" || a.text() == b.text() || again.text() != a.text() {
			t.Errorf("alice %q, bob %q, alice's retry %q: want two executions, and alice's retry her own", a.text(), b.text(), again.text())
		}
		if n := h.runs.get("echo:c"); n != 2 {
			t.Errorf("tool ran %d times, want 2", n)
		}
	})
}
