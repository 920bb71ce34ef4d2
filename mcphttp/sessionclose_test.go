package mcphttp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/mcphttp"
)

// deleteSession closes an MCP session as a client does (go-sdk's
// ClientSession.Close, the TypeScript SDK's terminateSession): HTTP DELETE
// with its Mcp-Session-Id.
func (h *harness) deleteSession(t *testing.T, session string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, h.url, nil)
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", protocolVersion)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSessionClosedWhileCallRuns: a keyed call is running when its client
// closes the session (its connection dropped; the application terminates
// the session, then retries from a new one). go-sdk lets the tool finish
// but drops its result: the POST ends without a byte written. The wrapper
// must not turn that into a second execution, as it would by taking the
// silence for a rejection ("the inner handler answered nothing") and
// releasing the key. The session's DELETE waits (up to Options.Engine.Wait) for
// the calls the wrapper runs on it to answer, so the result is recorded and
// the retry from the new session is its replay.
//
// With curl alone:
//
//	SID=$(initialize)
//	curl -N $MCP -H "Mcp-Session-Id: $SID" -d '{...tools/call slow, _meta.idempotencyKey K...}' &
//	curl -X DELETE $MCP -H "Mcp-Session-Id: $SID"
//	SID2=$(initialize); curl $MCP -H "Mcp-Session-Id: $SID2" -d '{...same call, same K...}'
func TestSessionClosedWhileCallRuns(t *testing.T) {
	t.Parallel()
	h, deleting := newHarnessSignallingDelete(t, mcphttp.Options{})
	_, code, retry := closeSessionMidCall(t, h, deleting, "s")
	if code != http.StatusNoContent && code != http.StatusOK {
		t.Errorf("DELETE: HTTP %d", code)
	}
	if n := h.runs.get("gate:s"); n != 1 {
		t.Fatalf("the tool ran %d times; the retry from a new session got %s", n, retry.raw)
	}
	if retry.text() != "gate s #1" {
		t.Errorf("the retry got %s, want the first run's result (gate s #1) replayed", retry.raw)
	}
}

// TestSessionClosedWhileCallRunsNoWait: with Options.Engine.Wait negative the
// DELETE is not held, and go-sdk drops the answer of the call still running
// on the closed session. The tool may have run, so its claim is left to its
// lease: the retry from a new session is told the call is in flight, and
// does not run the tool again.
func TestSessionClosedWhileCallRunsNoWait(t *testing.T) {
	t.Parallel()
	h, deleting := newHarnessSignallingDelete(t, mcphttp.Options{Engine: engine.Options{Wait: -1}})
	first, _, retry := closeSessionMidCall(t, h, deleting, "n")
	for _, m := range first {
		if m.Method == "" {
			t.Fatalf("the closed session's call was answered: %s", m.raw)
		}
	}
	if n := h.runs.get("gate:n"); n != 1 {
		t.Fatalf("the tool ran %d times; the retry from a new session got %s", n, retry.raw)
	}
	if retry.Error == nil || retry.Error.Code != mcphttp.CodeInFlight {
		t.Errorf("the retry got %s, want code %d (the claim left to its lease)", retry.raw, mcphttp.CodeInFlight)
	}
}

// newHarnessSignallingDelete is a harness that sends on deleting when the
// first DELETE reaches the server (later ones, the cleanups', pass).
func newHarnessSignallingDelete(t *testing.T, wrap mcphttp.Options) (h *harness, deleting chan struct{}) {
	deleting = make(chan struct{}, 1)
	return newHarness(t, harnessOptions{wrap: wrap, arrived: func(r *http.Request) {
		if r.Method == http.MethodDelete {
			select {
			case deleting <- struct{}{}:
			default:
			}
		}
	}}), deleting
}

// closeSessionMidCall runs the gate tool with a key on a new session,
// closes the session while the tool runs, lets the tool finish, and retries
// the call from a new session. It returns what the first call's POST
// carried, the DELETE's status, and the retry's answer.
func closeSessionMidCall(t *testing.T, h *harness, deleting <-chan struct{}, text string) (first []rpcMessage, deleteStatus int, retry rpcMessage) {
	t.Helper()
	session := h.initialize(t)
	meta := map[string]any{"idempotencyKey": "closed-session-" + text}
	answered := make(chan []rpcMessage, 1)
	go func() {
		answered <- readMessages(t, h.post(t, session, callBody(1, "gate", map[string]any{"text": text}, meta), nil))
	}()
	<-h.entered
	deleted := make(chan int, 1)
	go func() { deleted <- h.deleteSession(t, session) }()
	<-deleting
	// The DELETE has reached the server while the tool runs (go-sdk's
	// DELETE waits for the tool itself). Unheld, go-sdk closes the session
	// at once; the pause makes sure it would have before the tool finishes.
	// (A window for a defect to show: nothing signals a close that, held,
	// does not happen.)
	time.Sleep(50 * time.Millisecond)
	close(h.gate)
	first, deleteStatus = <-answered, <-deleted
	return first, deleteStatus, h.call(t, h.initialize(t), 2, "gate", map[string]any{"text": text}, meta)
}
