package mcphttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/teststore"
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

// TestLeaseOverBeforeTheTool: engine.TestSynctestLeaseOverBeforeTheWork
// through the wrapper. The inner handler never gets the call, which a tool
// ignoring its context would run; the client gets CodeUnavailable with
// retryAfterMs, and its retry runs the tool once.
func TestLeaseOverBeforeTheTool(t *testing.T) {
	t.Parallel()
	teststore.LeaseOverBeforeTheWork(t, func(t *testing.T, store idem.Store, opts engine.Options) {
		runs := 0
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			_ = json.NewDecoder(r.Body).Decode(&msg)
			if msg.Method == "tools/call" {
				runs++
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"run %d"}]}}`, msg.ID, runs)
		})
		h := mcphttp.New(store, mcphttp.Options{Engine: opts})(inner)
		call := func() (res struct {
			Result *json.RawMessage `json:"result"`
			Error  *struct {
				Code int `json:"code"`
				Data struct {
					Reason       string `json:"reason"`
					RetryAfterMs int64  `json:"retryAfterMs"`
				} `json:"data"`
			} `json:"error"`
		}, raw string) {
			req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(callBody(1, "refund", nil, map[string]any{"idempotencyKey": "k"})))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
				t.Fatalf("answer %s: %v", rec.Body, err)
			}
			return res, rec.Body.String()
		}
		first, raw := call()
		if runs != 0 || first.Error == nil || first.Error.Code != mcphttp.CodeUnavailable ||
			first.Error.Data.Reason != mcphttp.ReasonUnavailable || first.Error.Data.RetryAfterMs <= 0 {
			t.Fatalf("the tool ran %d times; answered %s, want no run and error %d (%s) with retryAfterMs",
				runs, raw, mcphttp.CodeUnavailable, mcphttp.ReasonUnavailable)
		}
		if retry, raw := call(); runs != 1 || retry.Result == nil {
			t.Fatalf("the retry answered %s, the tool ran %d times; want a result, run once", raw, runs)
		}
	})
}
