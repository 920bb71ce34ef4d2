//lint:file-ignore SA1019 sampling (deprecated by SEP-2577, still in the protocol) is how a server request reuses an in-flight id.
package mcphttp_test

import (
	"bufio"
	"bytes"
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

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Main(m))
}

// runs counts tool executions: the side effects the wrapper must not
// repeat.
type runs struct {
	mu sync.Mutex
	n  map[string]int
	// seq numbers every execution, so two executions never return the
	// same text.
	seq int
	// added is closed at the next add; nil until watch needs it.
	added chan struct{}
}

func (r *runs) add(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[name]++
	r.seq++
	if r.added != nil {
		close(r.added)
		r.added = nil
	}
	return r.seq
}

// watch returns how many times name ran, and a channel closed at the next
// run of any tool.
func (r *runs) watch(name string) (int, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.added == nil {
		r.added = make(chan struct{})
	}
	return r.n[name], r.added
}

func (r *runs) get(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[name]
}

type harnessOptions struct {
	wrap         mcphttp.Options
	jsonResponse bool
	store        idem.Store
	upstream     string // URL the "meta" tool calls, if set
	runs         *runs  // shared across harnesses (a restarted server)
	// arrived, if set, sees every request as it reaches the server,
	// before the wrapper.
	arrived func(*http.Request)
	// cancelRequests, if set, ends every request's context when it is
	// done, as a server that shuts down cancels what still runs.
	cancelRequests context.Context
}

// harness is a real go-sdk MCP server behind mcphttp, over HTTP.
type harness struct {
	t     *testing.T
	store idem.Store
	runs  *runs
	url   string
	// gate blocks the "gate" tool until closed; entered receives once per
	// gate execution as it starts.
	gate    chan struct{}
	entered chan struct{}
	flaky   sync.Once
	srv     *httptest.Server
}

type textArgs struct {
	Text string `json:"text,omitempty"`
}

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	h := &harness{t: t, store: o.store, runs: o.runs, gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	if h.store == nil {
		h.store = memstore.New(memstore.Options{})
	}
	if h.runs == nil {
		h.runs = &runs{}
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "mcphttp-test", Version: "1"}, nil)
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		n := h.runs.add("echo:" + in.Text)
		return text(fmt.Sprintf("echo %s #%d", in.Text, n)), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "test_audio_content"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		h.runs.add("test_audio_content")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.AudioContent{Data: []byte("RIFF"), MIMEType: "audio/wav"}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "test_embedded_resource"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		h.runs.add("test_embedded_resource")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
			URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource",
		}}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "gate"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		h.entered <- struct{}{}
		<-h.gate
		n := h.runs.add("gate:" + in.Text)
		return text(fmt.Sprintf("gate %s #%d", in.Text, n)), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "flaky"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		n := h.runs.add("flaky")
		first := false
		h.flaky.Do(func() { first = true })
		if first {
			return nil, nil, &jsonrpc.Error{Code: -32000, Message: "transient failure"}
		}
		return text(fmt.Sprintf("flaky #%d", n)), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "fail"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		n := h.runs.add("fail")
		return nil, nil, fmt.Errorf("tool failed #%d", n)
	})
	mcp.AddTool(server, &mcp.Tool{Name: "close_stream"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		// Ends the call's SSE stream for the client to resume it
		// (SEP-1699, see the package doc), then finishes: the response goes to a stream the
		// wrapper never sees.
		n := h.runs.add("close_stream")
		req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: time.Millisecond})
		return text(fmt.Sprintf("closed #%d", n)), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "big"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		h.runs.add("big")
		return text(strings.Repeat("x", 8192)), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "sample"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		h.runs.add("sample")
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
			Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Text}}},
			MaxTokens: 10,
		})
		if err != nil {
			return nil, nil, err
		}
		tc, _ := res.Content.(*mcp.TextContent)
		if tc == nil {
			return nil, nil, fmt.Errorf("sampling returned %T", res.Content)
		}
		return text("sampled: " + tc.Text), nil, nil
	})
	var upstreams []string // the test's upstream receives the caller's credentials
	if o.upstream != "" {
		upstreams = []string{o.upstream}
	}
	upstreamClient := &http.Client{Transport: &mcphttp.Transport{Upstreams: upstreams}}
	mcp.AddTool(server, &mcp.Tool{Name: "meta"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		h.runs.add("meta")
		m := mcphttp.FromCallToolRequest(req)
		if o.upstream != "" {
			ctx = mcphttp.NewContext(ctx, m)
			ureq, err := http.NewRequestWithContext(ctx, http.MethodPost, o.upstream, nil)
			if err != nil {
				return nil, nil, err
			}
			resp, err := upstreamClient.Do(ureq)
			if err != nil {
				return nil, nil, err
			}
			resp.Body.Close()
		}
		b, _ := json.Marshal(map[string]string{"sessionId": m.SessionID, "idempotencyKey": m.IdempotencyKey})
		return text(string(b)), nil, nil
	})

	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{JSONResponse: o.jsonResponse})
	wrapped := mcphttp.New(h.store, o.wrap)(inner)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.arrived != nil {
			o.arrived(r)
		}
		if o.cancelRequests != nil {
			ctx, cancel := context.WithCancel(r.Context())
			defer context.AfterFunc(o.cancelRequests, cancel)()
			r = r.WithContext(ctx)
		}
		wrapped.ServeHTTP(w, r)
	}))
	h.url = h.srv.URL
	t.Cleanup(h.close)
	return h
}

// close stops the server: its MCP sessions are gone.
func (h *harness) close() {
	select {
	case <-h.gate:
	default:
		close(h.gate)
	}
	h.srv.CloseClientConnections()
	h.srv.Close()
}

// client connects a go-sdk client; hc may be nil.
func (h *harness) client(t *testing.T, hc *http.Client, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	if hc == nil {
		hc = &http.Client{}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "mcphttp-test-client", Version: "1"}, opts)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: h.url, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// --- a raw JSON-RPC client, for what go-sdk's client never does: choosing
// its own ids, reusing them, resending a request as it was. ---

const protocolVersion = "2025-11-25"

// initialize opens a session and returns its Mcp-Session-Id.
func (h *harness) initialize(t *testing.T) string {
	t.Helper()
	resp := h.post(t, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+protocolVersion+`","capabilities":{"sampling":{}},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	msgs := readMessages(t, resp)
	if resp.StatusCode != http.StatusOK || len(msgs) != 1 || msgs[0].Result == nil {
		t.Fatalf("initialize: %d %+v", resp.StatusCode, msgs)
	}
	session := resp.Header.Get("Mcp-Session-Id")
	if session == "" {
		t.Fatal("no Mcp-Session-Id")
	}
	resp = h.post(t, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: %d", resp.StatusCode)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, h.url, nil)
		req.Header.Set("Mcp-Session-Id", session)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	return session
}

func (h *harness) post(t *testing.T, session, body string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", protocolVersion)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result *struct {
		Content []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Resource *struct {
				URI string `json:"uri"`
			} `json:"resource"`
		} `json:"content"`
		IsError bool           `json:"isError"`
		Meta    map[string]any `json:"_meta"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Reason string `json:"reason"`
			Type   string `json:"type"`
		} `json:"data"`
	} `json:"error"`
	raw string
}

// replayed reports whether m is a result the wrapper marked as a replay.
func (m rpcMessage) replayed() bool {
	return m.Result != nil && m.Result.Meta[mcphttp.ReplayedMetaKey] == true
}

func (m rpcMessage) text() string {
	if m.Result == nil || len(m.Result.Content) == 0 {
		return ""
	}
	return m.Result.Content[0].Text
}

// streamMessages sends each JSON-RPC message of an SSE response as it
// arrives, and closes the channel at the end of the stream.
func streamMessages(t *testing.T, resp *http.Response) <-chan rpcMessage {
	ch := make(chan rpcMessage, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "" {
				var m rpcMessage
				if err := json.Unmarshal([]byte(data), &m); err != nil {
					t.Errorf("message %q: %v", data, err)
					return
				}
				m.raw = data
				ch <- m
			}
		}
	}()
	return ch
}

// readMessages reads every JSON-RPC message of a response, SSE or JSON.
func readMessages(t *testing.T, resp *http.Response) []rpcMessage {
	t.Helper()
	defer resp.Body.Close()
	var msgs []rpcMessage
	add := func(data string) {
		var m rpcMessage
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("message %q: %v", data, err)
		}
		m.raw = data
		msgs = append(msgs, m)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "" {
				add(data)
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK && len(bytes.TrimSpace(body)) > 0 {
		add(string(body))
	}
	return msgs
}

func callBody(id any, tool string, args any, meta map[string]any) string {
	params := map[string]any{"name": tool}
	if args != nil {
		params["arguments"] = args
	}
	if meta != nil {
		params["_meta"] = meta
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
	return string(b)
}

// call sends a tools/call and returns its one response.
func (h *harness) call(t *testing.T, session string, id any, tool string, args any, meta map[string]any) rpcMessage {
	t.Helper()
	resp := h.post(t, session, callBody(id, tool, args, meta), nil)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("tools/call: HTTP %d: %s", resp.StatusCode, b)
	}
	msgs := readMessages(t, resp)
	var final []rpcMessage
	for _, m := range msgs {
		if m.Method == "" {
			final = append(final, m)
		}
	}
	if len(final) != 1 {
		t.Fatalf("tools/call: want one response, got %+v", msgs)
	}
	if want, _ := json.Marshal(id); string(final[0].ID) != string(want) {
		t.Fatalf("response id %s, want %s", final[0].ID, want)
	}
	return final[0]
}

// signalStore reports every Wait call, so a test knows a duplicate is
// waiting without sleeping.
type signalStore struct {
	idem.Store
	waiting   chan struct{}
	completed chan struct{}
}

func (s *signalStore) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	err := s.Store.Complete(ctx, tok, res)
	select {
	case s.completed <- struct{}{}:
	default:
	}
	return err
}

func (s *signalStore) Wait(ctx context.Context, scope string, key idem.Key) error {
	select {
	case s.waiting <- struct{}{}:
	default:
	}
	return s.Store.Wait(ctx, scope, key)
}

// failingStore cannot be reached.
type failingStore struct{ idem.Store }

func (failingStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, &idem.UnavailableError{Op: "claim", Err: io.ErrUnexpectedEOF, RetryAfter: 2 * time.Second}
}
