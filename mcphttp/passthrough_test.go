package mcphttp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// TestPassThrough: everything but a single deduped call reaches the inner
// handler exactly as sent, and the store is never consulted.
func TestPassThrough(t *testing.T) {
	t.Parallel()
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("x", 2048) + `"}}}`
	tests := []struct {
		name, method, body string
	}{
		{"initialize", http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`},
		{"notification", http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{"tools/call without id", http.MethodPost, `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo"}}`},
		{"tools/call with null id", http.MethodPost, `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo"}}`},
		{"sampling reply", http.MethodPost, `{"jsonrpc":"2.0","id":1,"result":{"role":"assistant","content":{"type":"text","text":"x"},"model":"m"}}`},
		{"elicitation error reply", http.MethodPost, `{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}`},
		{"batch", http.MethodPost, `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}]`},
		{"other method", http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`},
		{"not JSON", http.MethodPost, `tools/call please`},
		{"truncated JSON", http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"`},
		{"tools/call without name", http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`},
		{"params not an object", http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}`},
		{"not JSON-RPC 2.0", http.MethodPost, `{"id":1,"method":"tools/call","params":{"name":"echo"}}`},
		{"longer than MaxBodyBytes", http.MethodPost, big},
		{"GET", http.MethodGet, ""},
		{"DELETE", http.MethodDelete, ""},
		{"empty POST", http.MethodPost, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []byte
			calls := 0
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				got, _ = io.ReadAll(r.Body)
				w.WriteHeader(http.StatusTeapot)
			})
			h := mcphttp.New(failingStore{memstore.New(memstore.Options{})}, mcphttp.Options{MaxBodyBytes: 1024})(inner)
			for range 2 {
				req := httptest.NewRequest(tt.method, "/mcp", strings.NewReader(tt.body))
				req.Header.Set("Mcp-Session-Id", "s")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusTeapot {
					t.Fatalf("status %d: the wrapper answered instead of the inner handler", rec.Code)
				}
				if string(got) != tt.body {
					t.Fatalf("inner handler got body %.80q, want %.80q", got, tt.body)
				}
			}
			if calls != 2 {
				t.Errorf("inner handler called %d times, want 2", calls)
			}
		})
	}
}

// TestStatelessNotDeduped: without Mcp-Session-Id and without
// _meta.idempotencyKey there is nothing to key a call by that tells two
// clients apart, so it passes through.
func TestStatelessNotDeduped(t *testing.T) {
	t.Parallel()
	calls := 0
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(http.StatusTeapot)
	})
	h := mcphttp.New(failingStore{memstore.New(memstore.Options{})}, mcphttp.Options{})(inner)
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(callBody(1, "echo", nil, nil)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusTeapot || calls != 1 {
		t.Errorf("status %d, %d calls: want the inner handler's answer", rec.Code, calls)
	}
}

// TestStreamsAsWritten: the inner handler's SSE events reach the client
// before the call ends, not when it is recorded.
func TestStreamsAsWritten(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n\n")
	})
	srv := httptest.NewServer(mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{})(inner))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(callBody(1, "echo", nil, nil)))
	req.Header.Set("Mcp-Session-Id", "s")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 256)
	n, err := resp.Body.Read(buf)
	if err != nil || !bytes.Contains(buf[:n], []byte("notifications/progress")) {
		t.Fatalf("first read %q, %v: want the progress event while the call runs", buf[:n], err)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if !bytes.Contains(rest, []byte(`"id":1`)) {
		t.Errorf("rest %q", rest)
	}
}

// TestNewPanicNamesField: the panic of an invalid option names the field.
func TestNewPanicNamesField(t *testing.T) {
	t.Parallel()
	for field, opts := range map[string]mcphttp.Options{
		"Options.Lease":          {Engine: engine.Options{Lease: -1}},
		"Options.StoreTimeout":   {Engine: engine.Options{StoreTimeout: -1}},
		"Options.MaxBodyBytes":   {MaxBodyBytes: -1},
		"Options.MaxRecordBytes": {MaxRecordBytes: -1},
		"Options.Methods":        {Methods: []string{""}},
	} {
		t.Run(field, func(t *testing.T) {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, field) {
					t.Errorf("panic %q, want one naming %s", msg, field)
				}
			}()
			mcphttp.New(memstore.New(memstore.Options{}), opts)
		})
	}
}

// TestNewPanics: misconfiguration fails at construction, never per
// request.
func TestNewPanics(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"nil store": func() { mcphttp.New(nil, mcphttp.Options{}) },
		"negative lease": func() {
			mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{Engine: engine.Options{Lease: -1}})
		},
		// A lease of 2ns renews every 0ns: time.NewTicker(0) would panic
		// in the renewal goroutine of the first call, killing the process.
		"lease under a millisecond": func() {
			mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{Engine: engine.Options{Lease: 2}})
		},
		"session cookie name with a space": func() {
			mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{SessionCookies: []string{"my session"}})
		},
		"negative record": func() { mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{MaxRecordBytes: -1}) },
		"initialize deduped": func() {
			mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{Methods: []string{"initialize"}})
		},
		"negative new-key window": func() {
			mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{NewKeyGuard: &mcphttp.NewKeyGuard{Window: -1}})
		},
		"unknown new-key action": func() {
			mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{NewKeyGuard: &mcphttp.NewKeyGuard{Action: 7}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
}

// FuzzRequestParsing sends any body through the wrapper in front of a
// handler that answers every call with a result: the inner handler always
// gets the body intact, and the wrapper never panics. A body the wrapper
// dedupes is answered from the store the second time, with the request's
// own id.
func FuzzRequestParsing(f *testing.F) {
	for _, seed := range []string{
		callBody(1, "echo", map[string]any{"text": "a"}, nil),
		callBody("x", "echo", nil, map[string]any{"idempotencyKey": "k", "sessionId": "s"}),
		callBody(1.5e3, "t", []any{1}, map[string]any{"idempotencyKey": 7}),
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"a":1,"a":2}}}`,
		`{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{"name":"e"}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","_meta":null}}`,
		`{"jsonrpc":"2.0","id":"\u0000","method":"tools/call","params":{"name":"\u2028"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"e","idempotencyKey":"k","requestState":"s","inputResponses":{"a":{"action":"accept"}},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"e","idempotencyKey":5,"requestState":null,"_meta":{"idempotencyKey":"j"}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"e"},"PARAMS":{"name":"f"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"e"},"params":{"name":"f"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got []byte
		calls := 0
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			got, _ = io.ReadAll(r.Body)
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(got, &req) != nil || len(req.ID) == 0 {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":{"method":"`+req.Method+`"}}`)
		})
		h := mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{})(inner)
		for i := range 2 {
			calls = 0
			got = nil
			req := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(body))
			req.Header.Set("Mcp-Session-Id", "s")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if calls == 0 {
				// Only a call the wrapper refuses outright (an id no
				// server answers under, a repeated member) is answered
				// without the inner handler, and never run.
				if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"code":-32600`) {
					t.Fatalf("attempt %d: inner handler not consulted, and the answer %d %s is not a refusal", i, rec.Code, rec.Body)
				}
				continue
			}
			// Either the inner handler ran the request (and saw the body
			// intact), or it only answered the wrapper's probe (ping, or
			// server/discover for a 2026-07-28 call).
			if !bytes.Equal(got, body) && !bytes.Contains(got, []byte(`"method":"ping"`)) && !bytes.Contains(got, []byte(`"method":"server/discover"`)) {
				t.Fatalf("attempt %d: inner handler got %q, want %q or a probe", i, got, body)
			}
		}
	})
}
