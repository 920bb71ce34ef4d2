//lint:file-ignore SA1019 sampling (deprecated by SEP-2577, still in the protocol) is how a server request reuses an in-flight id.
package mcphttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// resendCall is the http.RoundTripper of a client whose connection drops
// while a tools/call is in flight, and which then resends the call as it
// was: same body, same id, same session. Until the drop, the request is
// sent under a context that drop cancels, so the connection is really
// closed under the server. before runs between the drop and the resend.
type resendCall struct {
	base    http.RoundTripper
	tool    string
	dropped atomic.Bool
	// drop is called once the first call's request is on its way; it
	// returns when the connection should be dropped.
	drop   func()
	before func()
}

func (d *resendCall) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.Body == nil || d.dropped.Load() {
		return d.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body.Close()
	if !bytes.Contains(body, []byte(`"method":"tools/call"`)) || !bytes.Contains(body, []byte(`"`+d.tool+`"`)) {
		req.Body = io.NopCloser(bytes.NewReader(body))
		return d.base.RoundTrip(req)
	}
	d.dropped.Store(true)
	ctx, cancel := context.WithCancel(req.Context())
	first := req.Clone(ctx)
	first.Body = io.NopCloser(bytes.NewReader(body))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := d.base.RoundTrip(first); err == nil {
			resp.Body.Close() // the answer is lost, read or not
		}
	}()
	d.drop()
	cancel()
	<-done
	d.before()
	retry := req.Clone(req.Context())
	retry.Body = io.NopCloser(bytes.NewReader(body))
	return d.base.RoundTrip(retry)
}

// TestLostResponseRetried: the client's connection drops while the tool
// runs; the tool finishes and the client resends the same call (same id,
// same session). The tool ran once and the retry gets its result. go-sdk
// alone would run it twice: it ends a call's stream with the HTTP request.
func TestLostResponseRetried(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		json bool
	}{{"sse", false}, {"json", true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			store := &signalStore{Store: memstore.New(memstore.Options{}), completed: make(chan struct{}, 1)}
			h := newHarness(t, harnessOptions{jsonResponse: mode.json, store: store})
			rt := &resendCall{base: http.DefaultTransport, tool: "gate"}
			rt.drop = func() { <-h.entered }
			rt.before = func() {
				// The tool finishes after the drop. The client resends once
				// the call has ended: go-sdk itself rejects an id still in
				// flight on the session, and that check decides first.
				close(h.gate)
				<-store.completed
			}
			cs := h.client(t, &http.Client{Transport: rt}, nil)
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "gate", Arguments: map[string]any{"text": "a"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Content[0].(*mcp.TextContent).Text; got != "gate a #1" {
				t.Errorf("retry got %q, want the first execution's result", got)
			}
			if n := h.runs.get("gate:a"); n != 1 {
				t.Errorf("tool ran %d times, want 1", n)
			}
		})
	}
}

// TestLostResponseAfterFinish: the server finished and the client dropped
// the connection without reading the answer; the resent call replays.
func TestLostResponseAfterFinish(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)
	body := callBody(1, "echo", map[string]any{"text": "x"}, nil)
	resp := h.post(t, session, body, nil)
	resp.Body.Close() // lost
	retry := h.call(t, session, 1, "echo", map[string]any{"text": "x"}, nil)
	if retry.text() != "echo x #1" {
		t.Errorf("retry got %q, want the first execution's result", retry.text())
	}
	if n := h.runs.get("echo:x"); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}
}

// TestReusedID: JSON-RPC lets a client reuse an id
// once it was answered, and the conformance suite does, so a different tool
// or other arguments under a reused id is a fresh call, never another
// call's result. A genuine repeat still replays.
func TestReusedID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)

	audio := h.call(t, session, 1, "test_audio_content", nil, nil)
	if audio.Result == nil || audio.Result.Content[0].Type != "audio" {
		t.Fatalf("audio: %s", audio.raw)
	}
	embedded := h.call(t, session, 1, "test_embedded_resource", nil, nil)
	if embedded.Result == nil || embedded.Result.Content[0].Type != "resource" || embedded.Result.Content[0].Resource.URI != "test://embedded-resource" {
		t.Fatalf("test_embedded_resource under reused id 1 got %s", embedded.raw)
	}
	if n := h.runs.get("test_embedded_resource"); n != 1 {
		t.Errorf("test_embedded_resource ran %d times, want 1", n)
	}

	// Other arguments under a reused id: fresh call.
	a := h.call(t, session, 2, "echo", map[string]any{"text": "a"}, nil)
	b := h.call(t, session, 2, "echo", map[string]any{"text": "b"}, nil)
	if a.text() != "echo a #3" || b.text() != "echo b #4" {
		t.Errorf("got %q and %q, want two executions", a.text(), b.text())
	}
	// The same call again under the same id: a retry, replayed; the
	// arguments' member order and spacing do not matter.
	resp := h.post(t, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{ "arguments": { "text" : "b" }, "name":"echo"}}`, nil)
	msgs := readMessages(t, resp)
	if len(msgs) != 1 || msgs[0].text() != "echo b #4" || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("repeat got %+v (replayed %q), want the replay of #4", msgs, resp.Header.Get("Idempotent-Replayed"))
	}
	if n := h.runs.get("echo:b"); n != 1 {
		t.Errorf("echo b ran %d times, want 1", n)
	}
}

// TestTwoSessionsSameID: every client numbers its requests from 1; two
// sessions' id 1 are two calls.
func TestTwoSessionsSameID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	s1, s2 := h.initialize(t), h.initialize(t)
	r1 := h.call(t, s1, 1, "echo", map[string]any{"text": "same"}, nil)
	r2 := h.call(t, s2, 1, "echo", map[string]any{"text": "same"}, nil)
	if r1.text() == r2.text() {
		t.Errorf("both sessions got %q: one was answered with the other's result", r1.text())
	}
	if n := h.runs.get("echo:same"); n != 2 {
		t.Errorf("tool ran %d times, want 2", n)
	}
}

// TestMetaKeyReplay: the same _meta.idempotencyKey under a new id (go-sdk's
// client numbers every call anew) is replayed, with the new id: go-sdk's
// client only delivers a response whose id is the one it sent.
func TestMetaKeyReplay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	cs := h.client(t, nil, nil)
	params := &mcp.CallToolParams{
		Name: "echo", Arguments: map[string]any{"text": "k"},
		Meta: mcp.Meta{"idempotencyKey": "key-1", "sessionId": "conv-1"},
	}
	first, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	second, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := first.Content[0].(*mcp.TextContent).Text, second.Content[0].(*mcp.TextContent).Text; a != "echo k #1" || b != a {
		t.Errorf("got %q then %q, want the same first execution", a, b)
	}
	// Another client session, same key and _meta.sessionId: same scope.
	other := h.client(t, nil, nil)
	third, err := other.CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if got := third.Content[0].(*mcp.TextContent).Text; got != "echo k #1" {
		t.Errorf("other transport session got %q, want the replay", got)
	}
	// Another _meta.sessionId is another scope.
	params.Meta = mcp.Meta{"idempotencyKey": "key-1", "sessionId": "conv-2"}
	fourth, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if got := fourth.Content[0].(*mcp.TextContent).Text; got != "echo k #2" {
		t.Errorf("other conversation got %q, want a fresh execution", got)
	}
	if n := h.runs.get("echo:k"); n != 2 {
		t.Errorf("tool ran %d times, want 2", n)
	}
}

// TestMetaKeyReusedOtherArguments: the same key for another call is an
// error with a documented code and reason, and nothing runs.
func TestMetaKeyReusedOtherArguments(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	cs := h.client(t, nil, nil)
	meta := mcp.Meta{"idempotencyKey": "key-2"}
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "one"}, Meta: meta}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*mcp.CallToolParams{
		{Name: "echo", Arguments: map[string]any{"text": "two"}, Meta: meta},
		{Name: "fail", Meta: meta},
	} {
		_, err := cs.CallTool(t.Context(), p)
		var jerr *jsonrpc.Error
		if !errors.As(err, &jerr) {
			t.Fatalf("%s: error %v, want a JSON-RPC error", p.Name, err)
		}
		var data struct{ Reason string }
		_ = json.Unmarshal(jerr.Data, &data)
		if jerr.Code != mcphttp.CodeKeyReused || data.Reason != mcphttp.ReasonKeyReused {
			t.Errorf("%s: code %d reason %q, want %d %q", p.Name, jerr.Code, data.Reason, mcphttp.CodeKeyReused, mcphttp.ReasonKeyReused)
		}
	}
	if h.runs.get("echo:two") != 0 || h.runs.get("fail") != 0 {
		t.Error("a call with a reused key ran")
	}

	// An invalid key is invalid params, and nothing runs.
	_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "bad"}, Meta: mcp.Meta{"idempotencyKey": "tab\there"}})
	var jerr *jsonrpc.Error
	if !errors.As(err, &jerr) || jerr.Code != mcphttp.CodeInvalidParams || !bytes.Contains(jerr.Data, []byte(mcphttp.ReasonInvalidKey)) {
		t.Errorf("invalid key: %v, want invalid params with reason %s", err, mcphttp.ReasonInvalidKey)
	}
	if h.runs.get("echo:bad") != 0 {
		t.Error("a call with an invalid key ran")
	}
}

// TestInFlightDuplicateWaits: a duplicate of a call still running waits for
// it and gets its result; the tool runs once.
func TestInFlightDuplicateWaits(t *testing.T) {
	t.Parallel()
	store := &signalStore{Store: memstore.New(memstore.Options{}), waiting: make(chan struct{}, 1)}
	h := newHarness(t, harnessOptions{store: store})
	params := &mcp.CallToolParams{Name: "gate", Arguments: map[string]any{"text": "w"}, Meta: mcp.Meta{"idempotencyKey": "key-3"}}
	results := make([]string, 2)
	var wg sync.WaitGroup
	for i, cs := range []*mcp.ClientSession{h.client(t, nil, nil), h.client(t, nil, nil)} {
		wg.Go(func() {
			res, err := cs.CallTool(context.Background(), params)
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = res.Content[0].(*mcp.TextContent).Text
		})
		if i == 0 {
			<-h.entered // the original runs
		}
	}
	<-store.waiting // the duplicate waits
	close(h.gate)
	wg.Wait()
	if results[0] != "gate w #1" || results[1] != results[0] {
		t.Errorf("got %q, want both the one execution's result", results)
	}
	if n := h.runs.get("gate:w"); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}
}

// TestInFlightNoWait: past the wait bound the duplicate gets an error that
// says to retry; the retry then gets the result.
func TestInFlightNoWait(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{wrap: mcphttp.Options{Engine: engine.Options{Wait: -1}}})
	s1, s2 := h.initialize(t), h.initialize(t)
	meta := map[string]any{"idempotencyKey": "key-4"}
	done := make(chan rpcMessage)
	go func() {
		resp := h.post(t, s1, callBody(1, "gate", map[string]any{"text": "n"}, meta), nil)
		msgs := readMessages(t, resp)
		done <- msgs[len(msgs)-1]
	}()
	<-h.entered
	dup := h.call(t, s2, 7, "gate", map[string]any{"text": "n"}, meta)
	if dup.Error == nil || dup.Error.Code != mcphttp.CodeInFlight || dup.Error.Data.Reason != mcphttp.ReasonInFlight || !strings.Contains(dup.Error.Message, "retry") {
		t.Errorf("duplicate got %s, want code %d", dup.raw, mcphttp.CodeInFlight)
	}
	close(h.gate)
	orig := <-done
	retry := h.call(t, s2, 8, "gate", map[string]any{"text": "n"}, meta)
	if orig.text() != "gate n #1" || retry.text() != orig.text() {
		t.Errorf("original %q, retry %q", orig.text(), retry.text())
	}
}

// TestJSONRPCErrorReleases: a call that ends in a JSON-RPC error did not
// produce a result; a retry runs it again. A tool result with isError is a
// result, and is replayed.
func TestJSONRPCErrorReleases(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)
	meta := map[string]any{"idempotencyKey": "key-5"}
	first := h.call(t, session, 1, "flaky", nil, meta)
	if first.Error == nil {
		t.Fatalf("first: %s, want a JSON-RPC error", first.raw)
	}
	second := h.call(t, session, 2, "flaky", nil, meta)
	if second.text() != "flaky #2" {
		t.Errorf("retry got %s, want a second execution", second.raw)
	}

	failed := h.call(t, session, 3, "fail", nil, nil)
	again := h.call(t, session, 3, "fail", nil, nil)
	if !failed.Result.IsError || !again.Result.IsError || again.text() != failed.text() || !again.replayed() {
		t.Errorf("isError result %s, retry %s: want the replay", failed.raw, again.raw)
	}
	if n := h.runs.get("fail"); n != 1 {
		t.Errorf("failing tool ran %d times, want 1", n)
	}
}

// TestSamplingReplyPassesThrough: the server asks the client for a sampling
// completion during the call, under an id equal to the call's; the client's
// reply reuses the in-flight id and must reach the server untouched.
func TestSamplingReplyPassesThrough(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)

	resp := h.post(t, session, callBody(1, "sample", map[string]any{"text": "hi"}, nil), nil)
	events := streamMessages(t, resp)
	req := <-events
	if req.Method != "sampling/createMessage" {
		t.Fatalf("got %s, want a sampling request", req.raw)
	}
	if string(req.ID) != "1" {
		// go-sdk numbers a session's server requests from 1; the test is
		// about a reply that reuses the in-flight call's id.
		t.Fatalf("server request id %s, want 1 (the in-flight call's id)", req.ID)
	}
	reply := h.post(t, session, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":{"role":"assistant","content":{"type":"text","text":"sampled text"},"model":"m"}}`, nil)
	reply.Body.Close()
	if reply.StatusCode != http.StatusAccepted {
		t.Fatalf("sampling reply: HTTP %d, want 202", reply.StatusCode)
	}
	final := <-events
	if final.text() != "sampled: sampled text" {
		t.Errorf("call got %s", final.raw)
	}
	for range events {
	}
}

// TestSamplingWithClient: the same through go-sdk's client.
func TestSamplingWithClient(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	cs := h.client(t, nil, &mcp.ClientOptions{
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "from client"}}, nil
		},
	})
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "sample", Arguments: map[string]any{"text": "q"}, Meta: mcp.Meta{"idempotencyKey": "key-6"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != "sampled: from client" {
		t.Errorf("got %q", got)
	}
}

// TestInnerHandlerDecidesFirst: a retry the inner handler would reject is
// never answered from the store, whatever the store holds.
func TestInnerHandlerDecidesFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)
	meta := map[string]any{"idempotencyKey": "key-7"}
	first := h.call(t, session, 1, "echo", map[string]any{"text": "d"}, meta)
	if first.text() != "echo d #1" {
		t.Fatal(first.raw)
	}
	body := callBody(2, "echo", map[string]any{"text": "d"}, meta)
	tests := []struct {
		name    string
		session string
		header  http.Header
		host    string
		want    int
	}{
		{"unknown session", "no-such-session", nil, "", http.StatusNotFound},
		{"DNS rebinding", session, nil, "evil.example", http.StatusForbidden},
		{"unsupported protocol version", session, http.Header{"Mcp-Protocol-Version": {"1999-01-01"}}, "", http.StatusBadRequest},
		{"wrong content type", session, http.Header{"Content-Type": {"text/plain"}}, "", http.StatusUnsupportedMediaType},
		{"Accept without SSE", session, http.Header{"Accept": {"application/json"}}, "", http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", tt.session)
			req.Header.Set("Mcp-Protocol-Version", protocolVersion)
			for k, v := range tt.header {
				req.Header[k] = v
			}
			if tt.host != "" {
				req.Host = tt.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want || bytes.Contains(b, []byte("echo d")) {
				t.Errorf("HTTP %d %q, want the inner handler's %d", resp.StatusCode, b, tt.want)
			}
		})
	}
	if n := h.runs.get("echo:d"); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}
	// The same retry with valid headers replays.
	if retry := h.call(t, session, 2, "echo", map[string]any{"text": "d"}, meta); retry.text() != "echo d #1" {
		t.Errorf("valid retry got %s", retry.raw)
	}
}

// TestReplayFraming: a replay comes in the framing the inner handler uses.
func TestReplayFraming(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, contentType string
		json              bool
	}{{"sse", "text/event-stream", false}, {"json", "application/json", true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOptions{jsonResponse: tt.json})
			session := h.initialize(t)
			meta := map[string]any{"idempotencyKey": "key-8"}
			first := h.call(t, session, "a", "echo", map[string]any{"text": "f"}, meta)
			resp := h.post(t, session, callBody("b", "echo", map[string]any{"text": "f"}, meta), nil)
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, tt.contentType) {
				t.Errorf("replay Content-Type %q, want %s", ct, tt.contentType)
			}
			msgs := readMessages(t, resp)
			if len(msgs) != 1 || string(msgs[0].ID) != `"b"` || msgs[0].text() != first.text() {
				t.Errorf("replay %+v, want %q under id \"b\"", msgs, first.text())
			}
		})
	}
}

// TestUnreplayable: a response larger than MaxRecordBytes still reaches the
// client; the retry is neither run nor replayed.
func TestUnreplayable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{wrap: mcphttp.Options{MaxRecordBytes: 1024}})
	session := h.initialize(t)
	first := h.call(t, session, 1, "big", nil, nil)
	if len(first.text()) != 8192 {
		t.Fatalf("first call got %d bytes", len(first.text()))
	}
	retry := h.call(t, session, 1, "big", nil, nil)
	if retry.Error == nil || retry.Error.Code != mcphttp.CodeUnreplayable || retry.Error.Data.Reason != mcphttp.ReasonUnreplayable {
		t.Errorf("retry got %.200s", retry.raw)
	}
	if n := h.runs.get("big"); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}
}

// TestStoreUnavailable: without a claim the call never runs.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{store: failingStore{memstore.New(memstore.Options{})}})
	session := h.initialize(t)
	got := h.call(t, session, 1, "echo", map[string]any{"text": "u"}, nil)
	if got.Error == nil || got.Error.Code != mcphttp.CodeUnavailable || got.Error.Data.Reason != mcphttp.ReasonUnavailable {
		t.Errorf("got %s", got.raw)
	}
	if n := h.runs.get("echo:u"); n != 0 {
		t.Errorf("tool ran %d times without a claim", n)
	}
}

// TestServerRestart: the server restarts (its MCP sessions are gone), the
// client re-initializes and retries with the same _meta.idempotencyKey: the
// replay. integration/ runs the same over PostgreSQL.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	counts := &runs{}
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "r"}, Meta: mcp.Meta{"idempotencyKey": "key-9", "sessionId": "conv"}}

	before := newHarness(t, harnessOptions{store: store, runs: counts})
	cs := before.client(t, nil, nil)
	res1, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	// The old process is gone with its sessions. (The client closes its
	// session first only so that no server goroutine outlives the test.)
	_ = cs.Close()
	before.close()

	after := newHarness(t, harnessOptions{store: store, runs: counts})
	res2, err := after.client(t, nil, nil).CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := res1.Content[0].(*mcp.TextContent).Text, res2.Content[0].(*mcp.TextContent).Text; a != b {
		t.Errorf("after restart got %q, want %q", b, a)
	}
	if n := counts.get("echo:r"); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}
}

// TestMetaForwarded: the _meta-to-headers mapping end to end. The tool calls an
// upstream over mcphttp.Transport, which carries _meta.sessionId as
// X-Session-Id and, as X-Idempotency-Key, the call's key bound to the caller
// (_meta.idempotencyKey, or the key the wrapper derived when _meta has none):
// never the client's key as sent. A client cannot set the forwarded key.
func TestMetaForwarded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []http.Header
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
	}))
	t.Cleanup(upstream.Close)
	h := newHarness(t, harnessOptions{upstream: upstream.URL})
	session := h.initialize(t)

	withMeta := h.call(t, session, 1, "meta", nil, map[string]any{"sessionId": "conv-9", "idempotencyKey": "agent-key"})
	var bound map[string]string
	if err := json.Unmarshal([]byte(withMeta.text()), &bound); err != nil {
		t.Fatal(err)
	}
	if k := bound["idempotencyKey"]; len(k) != 64 || k == "agent-key" || bound["sessionId"] != "conv-9" {
		t.Errorf("tool saw %v, want a bound 64-hex key and session conv-9", bound)
	}
	creds := http.Header{"X-Api-Key": {"tenant-key"}, "Authorization": {"Bearer tenant-token"}}
	resp := h.post(t, session, callBody(2, "meta", nil, nil), http.Header{
		mcphttp.DerivedKeyHeader: {"forged"}, "X-Api-Key": creds["X-Api-Key"], "Authorization": creds["Authorization"],
	})
	derived := readMessages(t, resp)
	if len(derived) != 1 {
		t.Fatalf("got %+v", derived)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(derived[0].text()), &m); err != nil {
		t.Fatal(err)
	}
	if k := m["idempotencyKey"]; len(k) != 64 || k == "forged" || m["sessionId"] != "" {
		t.Errorf("tool saw %v, want a derived 64-hex key and no session", m)
	}
	// The retry (same caller) is replayed: the upstream is not called again.
	readMessages(t, h.post(t, session, callBody(2, "meta", nil, nil), creds))

	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("upstream called %d times, want 2", len(seen))
	}
	if seen[0].Get("X-Session-Id") != "conv-9" || seen[0].Get("X-Idempotency-Key") != bound["idempotencyKey"] {
		t.Errorf("upstream headers %v", seen[0])
	}
	if seen[1].Get("X-Session-Id") != "" || seen[1].Get("X-Idempotency-Key") != m["idempotencyKey"] {
		t.Errorf("upstream headers %v, want X-Idempotency-Key %s", seen[1], m["idempotencyKey"])
	}
	// The caller's credentials travel with the keys, so the
	// upstream scopes the key to the same caller.
	if seen[0].Get("X-Api-Key") != "" || seen[0].Get("Authorization") != "" {
		t.Errorf("credentials forwarded for a call that carried none: %v", seen[0])
	}
	if seen[1].Get("X-Api-Key") != "tenant-key" || seen[1].Get("Authorization") != "Bearer tenant-token" {
		t.Errorf("upstream headers %v, want the caller's X-Api-Key and Authorization", seen[1])
	}
}

// TestStreamClosedKeepsClaim: when the call's stream ends without its
// response (the server closed it for the client to resume), the tool may
// still be running; the claim stays, and a retry does not run it again.
func TestStreamClosedKeepsClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{wrap: mcphttp.Options{Engine: engine.Options{Wait: -1}}})
	session := h.initialize(t)
	meta := map[string]any{"idempotencyKey": "key-10"}
	resp := h.post(t, session, callBody(1, "close_stream", nil, meta), nil)
	for _, m := range readMessages(t, resp) {
		if m.Method == "" {
			t.Fatalf("the closed stream carried the response %s", m.raw)
		}
	}
	retry := h.call(t, session, 2, "close_stream", nil, meta)
	if retry.Error == nil || retry.Error.Code != mcphttp.CodeInFlight {
		t.Errorf("retry got %s, want code %d", retry.raw, mcphttp.CodeInFlight)
	}
	if n := h.runs.get("close_stream"); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}
}

// TestPrincipalScopes: the same _meta.idempotencyKey from two principals
// (credentials) is two calls; from the same principal, one.
func TestPrincipalScopes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)
	meta := map[string]any{"idempotencyKey": "key-11"}
	texts := map[string]string{}
	for i, auth := range []string{"Bearer alice", "Bearer bob", "Bearer alice"} {
		resp := h.post(t, session, callBody(i, "echo", map[string]any{"text": "p"}, meta), http.Header{"Authorization": {auth}})
		msgs := readMessages(t, resp)
		if len(msgs) != 1 {
			t.Fatalf("%s: %+v", auth, msgs)
		}
		if prev, ok := texts[auth]; ok && prev != msgs[0].text() {
			t.Errorf("%s got %q, then %q", auth, prev, msgs[0].text())
		}
		texts[auth] = msgs[0].text()
	}
	if texts["Bearer alice"] == texts["Bearer bob"] {
		t.Errorf("two principals got one result %q", texts["Bearer alice"])
	}
	if n := h.runs.get("echo:p"); n != 2 {
		t.Errorf("tool ran %d times, want 2", n)
	}
}

// TestStoreFull: a store full of live claims and retained results refuses a
// new call's key; the wrapper answers with a JSON-RPC error that says to
// retry, and does not run the tool.
func TestStoreFull(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{store: memstore.New(memstore.Options{Capacity: 1})})
	s1, s2 := h.initialize(t), h.initialize(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		readMessages(t, h.post(t, s1, callBody(1, "gate", map[string]any{"text": "a"}, map[string]any{"idempotencyKey": "holds-the-store"}), nil))
	}()
	<-h.entered
	got := h.call(t, s2, 2, "echo", map[string]any{"text": "full"}, map[string]any{"idempotencyKey": "new-key"})
	close(h.gate)
	<-done
	if got.Error == nil || got.Error.Code != mcphttp.CodeUnavailable || !strings.Contains(got.Error.Message, "full") {
		t.Errorf("got %s, want code %d saying the store is full", got.raw, mcphttp.CodeUnavailable)
	}
	if n := h.runs.get("echo:full"); n != 0 {
		t.Errorf("tool ran %d times without a claim", n)
	}
}
