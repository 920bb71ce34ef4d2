package mcphttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// TestParamHeaderKeyFromGoSDKClient: from 2026-07-28 a tool may have a
// parameter mirrored into an Mcp-Param-{Name} header (x-mcp-header in its
// input schema), and clients send it. A tool whose idempotencyKey argument
// is mirrored as "Idempotency-Key" gets its calls' key in
// Mcp-Param-Idempotency-Key; go-sdk's client sends it, and its retry (a new
// id, no other key) is a replay; a wrapper that did not read the header
// would pass a 2026-07-28 call without another key through, and run it
// again.
func TestParamHeaderKeyFromGoSDKClient(t *testing.T) {
	t.Parallel()
	runs := &runs{}
	server := mcp.NewServer(&mcp.Implementation{Name: "param-header", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "book", InputSchema: json.RawMessage(`{"type":"object","properties":{
		"room":{"type":"string"},
		"idempotencyKey":{"type":"string","x-mcp-header":"Idempotency-Key"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest, in map[string]any) (*mcp.CallToolResult, any, error) {
			n := runs.add("book")
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "booked #" + string(rune('0'+n))}}}, nil, nil
		})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true})
	var sent []string
	srv := httptest.NewServer(mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("Mcp-Param-Idempotency-Key"); v != "" {
			sent = append(sent, v)
		}
		inner.ServeHTTP(w, r)
	})))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if _, err := cs.ListTools(t.Context(), nil); err != nil { // the client learns the x-mcp-header
		t.Fatal(err)
	}
	var texts []string
	for range 2 {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "book", Arguments: map[string]any{"room": "7", "idempotencyKey": "book-7"}})
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, resultText(t, res))
	}
	if len(sent) == 0 {
		t.Fatal("go-sdk's client sent no Mcp-Param-Idempotency-Key: the test does not test the carrier")
	}
	if n := runs.get("book"); n != 1 || texts[0] != texts[1] {
		t.Errorf("the tool ran %d times (answers %q), want once, the retry replayed", n, texts)
	}
}

// TestParamHeaderKey: the Mcp-Param-Idempotency-Key header is a key source
// at either version, its value as the spec encodes it (plain, or
// =?base64?…?=), under the rule every source follows: another source (or
// the argument the header mirrors) naming another key is refused, and
// nothing runs.
func TestParamHeaderKey(t *testing.T) {
	t.Parallel()
	forEachVersion(t, func(t *testing.T, h *vharness) {
		r := h.raw(t, h.url)
		for i, value := range []string{"param-key", "=?base64?IHBhZGRlZCA9P2Jhc2U2ND8gPz0=?="} {
			var first rpcMessage
			for id := range 2 {
				_, msg := r.call(10*i+id, map[string]any{"arguments": map[string]any{"amount": 10 + i}},
					http.Header{mcphttp.SourceParamHeader: {value}})
				if id == 0 {
					first = msg
				} else if msg.text() != first.text() || !msg.replayed() {
					t.Errorf("%s: got %s then %s, want the first replayed", value, first.raw, msg.raw)
				}
			}
		}
		if n := h.runs.get("charge"); n != 2 {
			t.Errorf("the tool ran %d times for two keys, want 2", n)
		}
		// The base64 value is the key " padded =?base64? ?=": the same key
		// in _meta agrees with it.
		_, msg := r.call(30, map[string]any{"arguments": map[string]any{"amount": 11}, "_meta": map[string]any{"idempotencyKey": " padded =?base64? ?="}},
			http.Header{mcphttp.SourceParamHeader: {"=?base64?IHBhZGRlZCA9P2Jhc2U2ND8gPz0=?="}})
		if !msg.replayed() {
			t.Errorf("the decoded header and the same key in _meta: %s, want a replay", msg.raw)
		}
		for name, c := range map[string]struct {
			params map[string]any
			header string
		}{
			"_meta disagrees":    {map[string]any{"arguments": map[string]any{"amount": 3}, "_meta": map[string]any{"idempotencyKey": "a"}}, "b"},
			"argument disagrees": {map[string]any{"arguments": map[string]any{"amount": 3, "idempotencyKey": "a"}}, "b"},
			"bad base64":         {map[string]any{"arguments": map[string]any{"amount": 3}}, "=?base64?!!?="},
		} {
			_, msg := r.call(40, c.params, http.Header{mcphttp.SourceParamHeader: {c.header}})
			if msg.Error == nil || msg.Error.Code != mcphttp.CodeInvalidParams || !strings.Contains(msg.Error.Message, mcphttp.SourceParamHeader) {
				t.Errorf("%s: got %s, want invalid params naming %s", name, msg.raw, mcphttp.SourceParamHeader)
			}
		}
		if n := h.runs.get("charge"); n != 2 {
			t.Errorf("refused calls ran the tool: %d runs, want 2", n)
		}
	})
}
