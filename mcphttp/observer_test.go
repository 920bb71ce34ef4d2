package mcphttp_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/mcphttp"
)

// The observer sees each call's fate: claimed and completed when it runs,
// replayed on a retry, mismatch on a key reused with other arguments,
// released when the tool fails with a JSON-RPC error.
func TestObserverEvents(t *testing.T) {
	t.Parallel()
	var events idemtest.Events
	h := newHarness(t, harnessOptions{wrap: mcphttp.Options{Observer: events.ObserveHTTP}})
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
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_ = events.WaitFor(ctx, func(all []idem.Event) bool {
		seen := map[idem.EventKind]int{}
		for _, e := range all {
			seen[e.Kind]++
		}
		for kind, n := range want {
			if seen[kind] != n {
				return false
			}
		}
		return true
	})
	for kind, n := range want {
		if got := events.Count(kind); got != n {
			t.Errorf("%v events = %d, want %d (all: %v)", kind, got, n, events.Kinds())
		}
	}
}
