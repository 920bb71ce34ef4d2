package mcphttp_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/mcphttp"
)

type eventLog struct {
	mu     sync.Mutex
	counts map[idem.EventKind]int
}

func (l *eventLog) observe(_ *http.Request, e idem.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[e.Kind]++
}

// The observer sees each call's fate: claimed and completed when it runs,
// replayed on a retry, mismatch on a key reused with other arguments,
// released when the tool fails with a JSON-RPC error.
func TestObserverEvents(t *testing.T) {
	t.Parallel()
	events := &eventLog{counts: map[idem.EventKind]int{}}
	h := newHarness(t, harnessOptions{wrap: mcphttp.Options{Observer: events.observe}})
	cs := h.client(t, nil, nil)
	call := func(p *mcp.CallToolParams) {
		t.Helper()
		_, _ = cs.CallTool(context.Background(), p)
	}
	meta := mcp.Meta{"idempotencyKey": "observed"}
	call(&mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "a"}, Meta: meta})
	call(&mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "a"}, Meta: meta})
	call(&mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "b"}, Meta: meta})
	call(&mcp.CallToolParams{Name: "flaky", Meta: mcp.Meta{"idempotencyKey": "flaky"}})

	want := map[idem.EventKind]int{
		idem.EventClaimed: 2, idem.EventCompleted: 1, idem.EventReplayed: 1,
		idem.EventMismatch: 1, idem.EventReleased: 1,
	}
	// A call's completion or release is reported once the inner handler
	// returned, which can be after its client read the answer: wait for
	// the events, then check them all.
	deadline := time.Now().Add(5 * time.Second)
	for !events.match(want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	events.mu.Lock()
	defer events.mu.Unlock()
	for kind, n := range want {
		if events.counts[kind] != n {
			t.Errorf("%v events = %d, want %d (all: %v)", kind, events.counts[kind], n, events.counts)
		}
	}
}

// match reports whether the events seen so far are want.
func (l *eventLog) match(want map[idem.EventKind]int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for kind, n := range want {
		if l.counts[kind] != n {
			return false
		}
	}
	return true
}
