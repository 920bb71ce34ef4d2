package mcphttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// The tests in this file run go-sdk's own client and server at each
// protocol version the wrapper serves: 2026-07-28 (a stateless server; no
// sessions, no initialize, a new id per retry, multi round-trip calls) and
// 2025-11-25 (a stateful server). Each case is the same table row at both.

const modern = "2026-07-28"

type version struct {
	name      string
	protocol  string // what go-sdk's client asks for
	stateless bool
}

var versions = []version{
	{"2026-07-28", modern, true},
	{"2025-11-25", "2025-11-25", false},
}

// vharness is go-sdk's server with a "charge" tool (a side effect, counted)
// and a "confirm" tool (asks the client to confirm first: MRTR at
// 2026-07-28, an elicitation inside the call before), behind mcphttp, and
// the same server unwrapped.
type vharness struct {
	v       version
	runs    *runs
	rounds  *runs  // handler invocations of "confirm", one per round
	url     string // wrapped
	bareURL string // unwrapped
	events  *idemtest.Events
}

type chargeArgs struct {
	Amount  int `json:"amount"`
	DelayMs int `json:"delay_ms,omitempty"`
}

func newVHarness(t *testing.T, v version, wrap mcphttp.Options) *vharness {
	t.Helper()
	h := &vharness{v: v, runs: &runs{}, rounds: &runs{}, events: &idemtest.Events{}}
	server := mcp.NewServer(&mcp.Implementation{Name: "versions", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "charge"}, func(ctx context.Context, req *mcp.CallToolRequest, in chargeArgs) (*mcp.CallToolResult, any, error) {
		select {
		case <-time.After(time.Duration(in.DelayMs) * time.Millisecond):
		case <-ctx.Done():
			h.runs.add("charge:cancelled")
			return nil, nil, ctx.Err()
		}
		n := h.runs.add("charge")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("charged %d #%d", in.Amount, n)}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "confirm"}, func(ctx context.Context, req *mcp.CallToolRequest, in chargeArgs) (*mcp.CallToolResult, any, error) {
		h.rounds.add("confirm")
		resp, ok := req.Params.InputResponses["ok"].(*mcp.ElicitResult)
		if !ok {
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{"ok": &mcp.ElicitParams{
					Message:         fmt.Sprintf("charge %d?", in.Amount),
					RequestedSchema: map[string]any{"type": "object"},
				}},
				RequestState: "confirm-" + fmt.Sprint(in.Amount),
			}, nil, nil
		}
		if resp.Action != "accept" {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "declined"}}}, nil, nil
		}
		n := h.runs.add("confirm")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("confirmed %d #%d", in.Amount, n)}}}, nil, nil
	})
	// PropagateRequestCancellation as the package doc recommends behind
	// mcphttp: a 2026-07-28 request's context is its tool's, so the
	// wrapper's detached context keeps a keyed call running when its client
	// goes away, and its cancellation (lease lost, shutdown) ends the tool.
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: v.stateless, PropagateRequestCancellation: true})
	if wrap.Observer == nil {
		wrap.Observer = h.events.ObserveHTTP
	}
	wrapped := httptest.NewServer(mcphttp.New(memstore.New(memstore.Options{}), wrap)(inner))
	bare := httptest.NewServer(inner)
	t.Cleanup(func() {
		wrapped.CloseClientConnections()
		wrapped.Close()
		bare.CloseClientConnections()
		bare.Close()
	})
	h.url, h.bareURL = wrapped.URL, bare.URL
	return h
}

// client connects go-sdk's client at the harness's version, through hc
// (nil: a plain client), answering elicitations with accept.
func (h *vharness) client(t *testing.T, hc *http.Client) *mcp.ClientSession {
	t.Helper()
	if hc == nil {
		hc = &http.Client{}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "versions-client", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
		},
	})
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: h.url, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true,
	}, &mcp.ClientSessionOptions{ProtocolVersion: h.v.protocol})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != h.v.protocol {
		t.Fatalf("negotiated %s, want %s", got, h.v.protocol)
	}
	return cs
}

func resultText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res == nil || len(res.Content) == 0 {
		t.Fatalf("no content in %+v", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T", res.Content[0])
	}
	return tc.Text
}

// dropToolCall is the transport of a client whose connection drops after
// a while once a tools/call is on its way: the answer is lost.
type dropToolCall struct {
	after time.Duration
}

func (d dropToolCall) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Mcp-Method") != "tools/call" && !bodyHas(req, `"tools/call"`) {
		return http.DefaultTransport.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), d.after)
	resp, err := http.DefaultTransport.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

func bodyHas(req *http.Request, s string) bool {
	if req.GetBody == nil {
		return false
	}
	b, err := req.GetBody()
	if err != nil {
		return false
	}
	defer b.Close()
	data, _ := io.ReadAll(b)
	return strings.Contains(string(data), s)
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	c.cancel()
	return c.ReadCloser.Close()
}

func keyed(name string, amount int, key string) *mcp.CallToolParams {
	return &mcp.CallToolParams{
		Name: name, Arguments: chargeArgs{Amount: amount, DelayMs: 300},
		Meta: mcp.Meta{"idempotencyKey": key},
	}
}

// waitRuns waits up to d for the tool to have run n times (a call whose
// client went away finishes after the client saw its error).
func waitRuns(t *testing.T, r *runs, name string, n int, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		got, added := r.watch(name)
		if got >= n {
			return
		}
		select {
		case <-added:
		case <-timeout:
			return
		}
	}
}

// TestVersionsLostResponse: the connection drops at 100 ms while the tool
// runs (300 ms); the application retries the call, which go-sdk's client
// sends under a new id. One execution, and the retry gets its result.
func TestVersionsLostResponse(t *testing.T) {
	t.Parallel()
	forEachVersion(t, func(t *testing.T, h *vharness) {
		lossy := h.client(t, &http.Client{Transport: dropToolCall{after: 100 * time.Millisecond}})
		if _, err := lossy.CallTool(t.Context(), keyed("charge", 5, "lost-1")); err == nil {
			t.Fatal("the first call got its answer; the drop did not happen")
		}
		retry, err := h.client(t, nil).CallTool(t.Context(), keyed("charge", 5, "lost-1"))
		if err != nil {
			t.Fatal(err)
		}
		if got := resultText(t, retry); got != "charged 5 #1" {
			t.Errorf("retry got %q, want the first execution's result", got)
		}
		// The first call's completion is reported once its tool
		// returned; after it, nothing is left to run the tool again.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if err := h.events.Wait(ctx, idem.EventCompleted, 1); err != nil {
			t.Fatalf("the first call did not complete: %v (events %v)", err, h.events.Kinds())
		}
		if n := h.runs.get("charge"); n != 1 {
			t.Errorf("tool ran %d times, want 1", n)
		}
		if n := h.runs.get("charge:cancelled"); n != 0 {
			t.Errorf("tool was cancelled %d times, want 0: it finishes by default", n)
		}
	})
}

// TestModernStreamCloseWithoutKey: at 2026-07-28 a client that closes a
// call's response stream cancels it (the spec's rule). A keyed call is the
// wrapper's and runs to completion for the retry the key announces
// (TestVersionsLostResponse); a call without a key is not deduplicated, and
// its cancellation is honoured: the tool's context ends, and the retry
// runs it again, as it would without the wrapper.
func TestModernStreamCloseWithoutKey(t *testing.T) {
	t.Parallel()
	h := newVHarness(t, versions[0], mcphttp.Options{})
	lossy := h.client(t, &http.Client{Transport: dropToolCall{after: 100 * time.Millisecond}})
	unkeyed := &mcp.CallToolParams{Name: "charge", Arguments: chargeArgs{Amount: 9, DelayMs: 300}}
	if _, err := lossy.CallTool(t.Context(), unkeyed); err == nil {
		t.Fatal("the call got its answer; the drop did not happen")
	}
	waitRuns(t, h.runs, "charge:cancelled", 1, 5*time.Second)
	if n, c := h.runs.get("charge"), h.runs.get("charge:cancelled"); n != 0 || c != 1 {
		t.Errorf("the tool completed %d times and was cancelled %d times, want cancelled once", n, c)
	}
}

// TestCancelWithClient: with Options.Engine.CancelWithClient, a client that goes
// away cancels the tool (MCP 2026-07-28: a closed stream is cancellation),
// nothing is recorded, and the retry runs the tool again.
func TestCancelWithClient(t *testing.T) {
	t.Parallel()
	h := newVHarness(t, versions[0], mcphttp.Options{Engine: engine.Options{CancelWithClient: true}})
	lossy := h.client(t, &http.Client{Transport: dropToolCall{after: 100 * time.Millisecond}})
	if _, err := lossy.CallTool(t.Context(), keyed("charge", 5, "cancel-1")); err == nil {
		t.Fatal("the first call got its answer; the drop did not happen")
	}
	waitRuns(t, h.runs, "charge:cancelled", 1, 10*time.Second)
	retry, err := h.client(t, nil).CallTool(t.Context(), keyed("charge", 5, "cancel-1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resultText(t, retry); !strings.HasPrefix(got, "charged 5 #") {
		t.Errorf("retry got %q", got)
	}
	if c, n := h.runs.get("charge:cancelled"), h.runs.get("charge"); c != 1 || n != 1 {
		t.Errorf("cancelled %d times and finished %d times, want 1 and 1", c, n)
	}
}

// TestVersionsConcurrentOneKey: two clients send one key at once; the tool
// runs once and both get its result.
func TestVersionsConcurrentOneKey(t *testing.T) {
	t.Parallel()
	forEachVersion(t, func(t *testing.T, h *vharness) {
		a, b := h.client(t, nil), h.client(t, nil)
		var wg sync.WaitGroup
		got := make([]string, 2)
		for i, cs := range []*mcp.ClientSession{a, b} {
			wg.Go(func() {
				res, err := cs.CallTool(context.Background(), keyed("charge", 7, "together"))
				if err != nil {
					t.Error(err)
					return
				}
				got[i] = resultText(t, res)
			})
		}
		wg.Wait()
		if got[0] != "charged 7 #1" || got[1] != got[0] {
			t.Errorf("got %q and %q, want one execution's result twice", got[0], got[1])
		}
		if n := h.runs.get("charge"); n != 1 {
			t.Errorf("tool ran %d times, want 1", n)
		}
	})
}

// bearer adds an Authorization header: a principal.
type bearer string

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(req)
}

// TestVersionsTwoPrincipals: two callers who send the same key are two
// calls.
func TestVersionsTwoPrincipals(t *testing.T) {
	t.Parallel()
	forEachVersion(t, func(t *testing.T, h *vharness) {
		alice := h.client(t, &http.Client{Transport: bearer("alice")})
		bob := h.client(t, &http.Client{Transport: bearer("bob")})
		ra, err := alice.CallTool(t.Context(), keyed("charge", 1, "k"))
		if err != nil {
			t.Fatal(err)
		}
		rb, err := bob.CallTool(t.Context(), keyed("charge", 1, "k"))
		if err != nil {
			t.Fatal(err)
		}
		if resultText(t, ra) == resultText(t, rb) {
			t.Errorf("both got %q: one was answered with the other's result", resultText(t, ra))
		}
		if n := h.runs.get("charge"); n != 2 {
			t.Errorf("tool ran %d times, want 2", n)
		}
	})
}

// TestVersionsConfirm: a tool that asks for confirmation first. At
// 2026-07-28 that is two requests (round 1 answers input_required, round
// 2 carries inputResponses and requestState under a new id), both with the
// same _meta.idempotencyKey, as go-sdk's client sends them; before, one
// request with an elicitation inside. Either way the call completes, the
// side effect runs once, and a retry of the whole call replays its result.
func TestVersionsConfirm(t *testing.T) {
	t.Parallel()
	forEachVersion(t, func(t *testing.T, h *vharness) {
		cs := h.client(t, nil)
		params := &mcp.CallToolParams{Name: "confirm", Arguments: chargeArgs{Amount: 9}, Meta: mcp.Meta{"idempotencyKey": "confirm-9"}}
		res, err := cs.CallTool(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		if got := resultText(t, res); got != "confirmed 9 #1" {
			t.Fatalf("got %q", got)
		}
		again, err := h.client(t, nil).CallTool(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		if got := resultText(t, again); got != "confirmed 9 #1" {
			t.Errorf("the repeated call got %q, want the first one's result", got)
		}
		if n := h.runs.get("confirm"); n != 1 {
			t.Errorf("side effect ran %d times, want 1", n)
		}
		// Two rounds ran (asking, then confirming), and the repeat
		// ran none: at 2026-07-28 its two rounds were both replays.
		if n := h.rounds.get("confirm"); n != 2 {
			t.Errorf("the tool handler ran %d rounds, want 2", n)
		}
	})
}

// forEachVersion runs f as a parallel subtest per version, with a fresh
// harness.
func forEachVersion(t *testing.T, f func(t *testing.T, h *vharness)) {
	for _, v := range versions {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			f(t, newVHarness(t, v, mcphttp.Options{}))
		})
	}
}

// raw is a JSON-RPC client that speaks one version by hand, for what
// go-sdk's client never does: keys outside _meta, chosen ids, chosen
// headers.
type raw struct {
	t       *testing.T
	url     string
	v       version
	session string
}

func (h *vharness) raw(t *testing.T, url string) *raw {
	t.Helper()
	r := &raw{t: t, url: url, v: h.v}
	if h.v.stateless {
		return r
	}
	resp := r.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+h.v.protocol+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	resp.Body.Close()
	r.session = resp.Header.Get("Mcp-Session-Id")
	if r.session == "" {
		t.Fatalf("initialize: HTTP %d, no session", resp.StatusCode)
	}
	resp = r.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	resp.Body.Close()
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, url, nil)
		req.Header.Set("Mcp-Session-Id", r.session)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	return r
}

// body builds a request of method with params, adding the _meta this
// version needs.
func (r *raw) body(id any, method string, params map[string]any) string {
	if params == nil {
		params = map[string]any{}
	}
	if r.v.stateless {
		meta, _ := params["_meta"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		meta["io.modelcontextprotocol/protocolVersion"] = r.v.protocol
		meta["io.modelcontextprotocol/clientCapabilities"] = map[string]any{}
		params["_meta"] = meta
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return string(b)
}

func (r *raw) post(body string, header http.Header) *http.Response {
	r.t.Helper()
	resp, err := http.DefaultClient.Do(r.request(body, header))
	if err != nil {
		r.t.Fatal(err)
	}
	return resp
}

// request is the POST of body that post sends, with this version's
// headers.
func (r *raw) request(body string, header http.Header) *http.Request {
	req, err := http.NewRequest(http.MethodPost, r.url, strings.NewReader(body))
	if err != nil {
		panic(err) // r.url parsed before
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if r.session != "" {
		req.Header.Set("Mcp-Session-Id", r.session)
	}
	if r.session != "" || r.v.stateless {
		req.Header.Set("Mcp-Protocol-Version", r.v.protocol)
	}
	if r.v.stateless {
		var w struct {
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		if json.Unmarshal([]byte(body), &w) == nil {
			req.Header.Set("Mcp-Method", w.Method)
			if w.Params.Name != "" {
				req.Header.Set("Mcp-Name", w.Params.Name)
			}
		}
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	return req
}

// call posts a tools/call and returns the HTTP response and its one
// JSON-RPC response.
func (r *raw) call(id any, params map[string]any, header http.Header) (*http.Response, rpcMessage) {
	r.t.Helper()
	params["name"] = "charge"
	resp := r.post(r.body(id, "tools/call", params), header)
	var final []rpcMessage
	for _, m := range readMessages(r.t, resp) {
		if m.Method == "" {
			final = append(final, m)
		}
	}
	if len(final) != 1 {
		r.t.Fatalf("tools/call: HTTP %d, want one response, got %+v", resp.StatusCode, final)
	}
	return resp, final[0]
}

// TestVersionsKeySources: a key is read from _meta.idempotencyKey,
// params.idempotencyKey or the Idempotency-Key header, and a retry under a
// new id with the key in the same place replays.
func TestVersionsKeySources(t *testing.T) {
	t.Parallel()
	sources := []struct {
		name   string
		params func(key string) map[string]any
		header func(key string) http.Header
	}{
		{"_meta.idempotencyKey", func(k string) map[string]any {
			return map[string]any{"_meta": map[string]any{"idempotencyKey": k}}
		}, nil},
		{"params.idempotencyKey", func(k string) map[string]any { return map[string]any{"idempotencyKey": k} }, nil},
		{"Idempotency-Key header", nil, func(k string) http.Header { return http.Header{"Idempotency-Key": {`"` + k + `"`}} }},
	}
	for _, v := range versions {
		for i, src := range sources {
			t.Run(v.name+"/"+src.name, func(t *testing.T) {
				t.Parallel()
				h := newVHarness(t, v, mcphttp.Options{})
				r := h.raw(t, h.url)
				key := fmt.Sprintf("source %d", i)
				send := func(id int) (*http.Response, rpcMessage) {
					params := map[string]any{}
					if src.params != nil {
						params = src.params(key)
					}
					params["arguments"] = map[string]any{"amount": 3}
					var header http.Header
					if src.header != nil {
						header = src.header(key)
					}
					return r.call(id, params, header)
				}
				_, first := send(1)
				resp, second := send(2)
				if first.text() != "charged 3 #1" || second.text() != first.text() {
					t.Errorf("got %q then %q, want one execution replayed", first.text(), second.text())
				}
				if resp.Header.Get("Idempotent-Replayed") != "true" {
					t.Errorf("the retry is not marked as a replay")
				}
				if n := h.runs.get("charge"); n != 1 {
					t.Errorf("tool ran %d times, want 1", n)
				}
			})
		}
	}
}

// TestVersionsKeySourcesDisagree: two sources with different keys are an
// invalid-params error naming both; nothing runs.
func TestVersionsKeySourcesDisagree(t *testing.T) {
	t.Parallel()
	forEachVersion(t, func(t *testing.T, h *vharness) {
		r := h.raw(t, h.url)
		resp, msg := r.call(1, map[string]any{
			"arguments": map[string]any{"amount": 3},
			"_meta":     map[string]any{"idempotencyKey": "a"},
		}, http.Header{"Idempotency-Key": {`"b"`}})
		if msg.Error == nil || msg.Error.Code != mcphttp.CodeInvalidParams ||
			!strings.Contains(msg.Error.Message, "_meta.idempotencyKey") || !strings.Contains(msg.Error.Message, "Idempotency-Key") {
			t.Errorf("got %s, want invalid params naming both sources", msg.raw)
		}
		if resp.Header.Get("Idempotent-Replayed") != "" {
			t.Error("an error the wrapper made is marked as a replay")
		}
		if n := h.runs.get("charge"); n != 0 {
			t.Errorf("tool ran %d times, want 0", n)
		}
	})
}

// TestVersionsWrapperErrorsAreNotReplays: a key reused for other arguments
// is the wrapper's own error, not a replay of anything.
func TestVersionsWrapperErrorsAreNotReplays(t *testing.T) {
	t.Parallel()
	forEachVersion(t, func(t *testing.T, h *vharness) {
		r := h.raw(t, h.url)
		meta := func() map[string]any { return map[string]any{"idempotencyKey": "reused"} }
		r.call(1, map[string]any{"arguments": map[string]any{"amount": 1}, "_meta": meta()}, nil)
		resp, msg := r.call(2, map[string]any{"arguments": map[string]any{"amount": 2}, "_meta": meta()}, nil)
		if msg.Error == nil || msg.Error.Code != mcphttp.CodeKeyReused {
			t.Fatalf("got %s, want key reused", msg.raw)
		}
		if got := resp.Header.Get("Idempotent-Replayed"); got != "" {
			t.Errorf("Idempotent-Replayed: %q on the wrapper's own error", got)
		}
	})
}

// TestModernSessionHeaderNotAKey: at 2026-07-28 the server ignores
// Mcp-Session-Id, so a client-chosen one must not key a call: two clients
// that send the same one and the same id, without a key, are two calls.
func TestModernSessionHeaderNotAKey(t *testing.T) {
	t.Parallel()
	h := newVHarness(t, versions[0], mcphttp.Options{})
	r := h.raw(t, h.url)
	header := http.Header{"Mcp-Session-Id": {"chosen-by-the-client"}}
	_, a := r.call(1, map[string]any{"arguments": map[string]any{"amount": 4}}, header)
	_, b := r.call(1, map[string]any{"arguments": map[string]any{"amount": 4}}, header)
	if a.text() == b.text() {
		t.Errorf("both got %q: one client was answered with the other's result", a.text())
	}
	if n := h.runs.get("charge"); n != 2 {
		t.Errorf("tool ran %d times, want 2", n)
	}
}

// TestVersionsToolsListIdentical: what the wrapper does not dedupe reaches
// the client exactly as the inner server sends it.
func TestVersionsToolsListIdentical(t *testing.T) {
	t.Parallel()
	forEachVersion(t, func(t *testing.T, h *vharness) {
		list := func(url string) string {
			r := h.raw(t, url)
			resp := r.post(r.body(5, "tools/list", nil), nil)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		wrapped, bare := list(h.url), list(h.bareURL)
		if wrapped != bare {
			t.Errorf("wrapped:\n%s\nunwrapped:\n%s", wrapped, bare)
		}
		if !strings.Contains(wrapped, `"charge"`) {
			t.Errorf("no tool list: %s", wrapped)
		}
	})
}

// readCounter is a request body that counts the reads made of it.
type readCounter struct {
	io.Reader
	reads int
}

func (r *readCounter) Read(p []byte) (int, error) {
	r.reads++
	return r.Reader.Read(p)
}

func (r *readCounter) Close() error { return nil }

// TestModernHeaderRouting: a 2026-07-28 POST whose Mcp-Method is not a
// deduplicated method reaches the inner handler with its body unread; a
// tools/call is still looked at.
func TestModernHeaderRouting(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		method, version string
		wantUnread      bool
	}{
		{"tools/list", modern, true},
		{"subscriptions/listen", modern, true},
		{"", modern, true}, // no Mcp-Method: the inner handler refuses it
		{"tools/call", modern, false},
		{"tools/list", "2025-11-25", false}, // headers optional: the body decides
	} {
		t.Run(tt.method+"@"+tt.version, func(t *testing.T) {
			t.Parallel()
			body := &readCounter{Reader: strings.NewReader(callBody(1, "echo", nil, nil))}
			var readsBefore int
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				readsBefore = body.reads
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusTeapot)
			})
			h := mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{})(inner)
			req := httptest.NewRequest(http.MethodPost, "/mcp", body)
			req.Header.Set("Mcp-Protocol-Version", tt.version)
			if tt.method != "" {
				req.Header.Set("Mcp-Method", tt.method)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusTeapot {
				t.Fatalf("status %d, want the inner handler's", rec.Code)
			}
			if unread := readsBefore == 0; unread != tt.wantUnread {
				t.Errorf("body read %d times before the inner handler ran; want unread: %v", readsBefore, tt.wantUnread)
			}
		})
	}
}

// TestModernRounds: a multi round-trip call by hand at 2026-07-28, one key
// on every round, each round under a new id. A lost round-1 answer retried
// replays round 1 (input_required again, nothing new runs); round 2 runs
// once, and its lost answer retried replays the final result.
func TestModernRounds(t *testing.T) {
	t.Parallel()
	h := newVHarness(t, versions[0], mcphttp.Options{})
	r := h.raw(t, h.url)
	send := func(id int, round2 bool) (*http.Response, string) {
		params := map[string]any{
			"name": "confirm", "arguments": map[string]any{"amount": 11},
			"_meta": map[string]any{"idempotencyKey": "rounds"},
		}
		if round2 {
			params["requestState"] = "confirm-11"
			params["inputResponses"] = map[string]any{"ok": map[string]any{"action": "accept", "content": map[string]any{}}}
		}
		resp := r.post(r.body(id, "tools/call", params), nil)
		msgs := readMessages(t, resp)
		if len(msgs) != 1 {
			t.Fatalf("round: %+v", msgs)
		}
		return resp, msgs[0].raw
	}
	_, first := send(1, false)
	resp, again := send(2, false)
	if !strings.Contains(first, `"input_required"`) || !strings.Contains(again, `"input_required"`) || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("round 1 got %s, its retry %s (replayed %q)", first, again, resp.Header.Get("Idempotent-Replayed"))
	}
	_, final := send(3, true)
	resp, finalAgain := send(4, true)
	if !strings.Contains(final, "confirmed 11 #1") || !strings.Contains(finalAgain, "confirmed 11 #1") || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("round 2 got %s, its retry %s", final, finalAgain)
	}
	if n := h.runs.get("confirm"); n != 1 {
		t.Errorf("side effect ran %d times, want 1", n)
	}
	if n := h.rounds.get("confirm"); n != 2 {
		t.Errorf("handler ran %d rounds, want 2", n)
	}
}

// TestModernMissingHeadersNotReplayed: at 2026-07-28 a call without the
// Mcp-Method or Mcp-Name header the spec requires is refused by the server
// (400), also when its key is completed: the wrapper must not answer it
// from the store. (The conformance suite's http-header-validation found
// it: the probe, server/discover, has no name to check.)
func TestModernMissingHeadersNotReplayed(t *testing.T) {
	t.Parallel()
	h := newVHarness(t, versions[0], mcphttp.Options{})
	r := h.raw(t, h.url)
	params := func() map[string]any {
		return map[string]any{"arguments": map[string]any{"amount": 6}, "_meta": map[string]any{"idempotencyKey": "headers"}}
	}
	if _, first := r.call(1, params(), nil); first.text() != "charged 6 #1" {
		t.Fatalf("first call: %s", first.raw)
	}
	for _, drop := range []string{"Mcp-Name", "Mcp-Method"} {
		p := params()
		p["name"] = "charge"
		req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(r.body(2, "tools/call", p)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", modern)
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "charge")
		req.Header.Del(drop)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "charged") {
			t.Errorf("without %s: HTTP %d %s, want the server's 400", drop, resp.StatusCode, b)
		}
	}
	if n := h.runs.get("charge"); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}
}

// TestStatelessOptionSessionNotAKey: go-sdk's stateless handler serves
// 2025-11-25 requests too, ignoring Mcp-Session-Id. With Options.Stateless
// a client-chosen session id never keys a call; without it (the stateful
// default) two clients that choose the same one share a result, which is
// why the option exists.
func TestStatelessOptionSessionNotAKey(t *testing.T) {
	t.Parallel()
	legacyOnStateless := version{"2025-11-25 stateless", "2025-11-25", true}
	for _, tt := range []struct {
		stateless bool
		want      int
	}{{true, 2}, {false, 1}} {
		t.Run(fmt.Sprint("Stateless=", tt.stateless), func(t *testing.T) {
			t.Parallel()
			h := newVHarness(t, legacyOnStateless, mcphttp.Options{Stateless: tt.stateless})
			post := func() {
				req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(callBody(1, "charge", map[string]any{"amount": 8}, nil)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
				req.Header.Set("Mcp-Session-Id", "chosen-by-the-client")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if msgs := readMessages(t, resp); len(msgs) != 1 || !strings.Contains(msgs[0].text(), "charged 8") {
					t.Fatalf("HTTP %d %+v", resp.StatusCode, msgs)
				}
			}
			post()
			post()
			if n := h.runs.get("charge"); n != tt.want {
				t.Errorf("tool ran %d times, want %d", n, tt.want)
			}
		})
	}
}

// TestModernProbeRejectionReported: a 2026-07-28 retry of a completed call
// that the server refuses (its _meta protocol version disagrees with its
// header) gets the server's refusal, not the replay, and the refusal is
// reported as idem.EventRejected.
func TestModernProbeRejectionReported(t *testing.T) {
	t.Parallel()
	h := newVHarness(t, versions[0], mcphttp.Options{})
	r := h.raw(t, h.url)
	params := func() map[string]any {
		return map[string]any{"arguments": map[string]any{"amount": 2}, "_meta": map[string]any{"idempotencyKey": "probed"}}
	}
	r.call(1, params(), nil)
	p := params()
	p["name"] = "charge"
	body := strings.Replace(r.body(2, "tools/call", p), `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`, `"io.modelcontextprotocol/protocolVersion":"2025-11-25"`, 1)
	resp := r.post(body, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "charged") {
		t.Errorf("HTTP %d %s, want the server's 400", resp.StatusCode, b)
	}
	if n := h.events.Count(idem.EventRejected); n != 1 {
		t.Errorf("%d rejected events, want 1", n)
	}
	if n := h.runs.get("charge"); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}
}
