package mcphttp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// TestServerCancelledWait: a duplicate waiting for the original call, whose
// request context the server ends while its client is still connected (a
// shutdown that cancels its requests once its bound runs out, as the demo
// and the robustness harness's service do), is told to retry: a JSON-RPC
// error with data.retryAfterMs. Found by the robustness harness (a SIGTERM
// fault, once it counted an empty answer as an anomaly): the wrapper took
// the ended context for a client that had left and wrote nothing, so the
// connected client got HTTP 200 with no JSON-RPC response.
func TestServerCancelledWait(t *testing.T) {
	t.Parallel()
	store := &signalStore{Store: memstore.New(memstore.Options{}), waiting: make(chan struct{}, 1), completed: make(chan struct{}, 1)}
	shutdown, cancelRequests := context.WithCancel(context.Background())
	h := newHarness(t, harnessOptions{store: store, wrap: mcphttp.Options{Engine: engine.Options{Wait: time.Minute}}, cancelRequests: shutdown})
	session := h.initialize(t)
	open := sync.OnceFunc(func() { close(h.gate) })
	t.Cleanup(open) // before the session's DELETE, which waits for the tool
	meta := map[string]any{"idempotencyKey": "server-cancelled"}
	original := make(chan []rpcMessage, 1)
	go func() {
		original <- readMessages(t, h.post(t, session, callBody(1, "gate", map[string]any{"text": "w"}, meta), nil))
	}()
	<-h.entered
	go func() {
		<-store.waiting
		cancelRequests()
	}()
	dup := readMessages(t, h.post(t, session, callBody(2, "gate", map[string]any{"text": "w"}, meta), nil))
	if len(dup) != 1 || dup[0].Error == nil || dup[0].Error.Code != mcphttp.CodeUnavailable {
		t.Errorf("the waiting duplicate was answered %+v; want one error, code %d (retry it)", dup, mcphttp.CodeUnavailable)
	}
	open()
	if got := <-original; len(got) != 1 || got[0].text() != "gate w #1" {
		t.Errorf("the original was answered %+v", got)
	}
}
