package faults_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testhttp"
)

// rawPost sends a POST /invoices written byte for byte, so that headers Go's
// client refuses to send (control characters, invalid UTF-8) reach the
// server as a hostile client would send them.
func rawPost(t *testing.T, addr string, headerLines []string, body []byte, chunked bool) testhttp.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var req bytes.Buffer
	req.WriteString("POST /invoices HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nConnection: close\r\n")
	for _, h := range headerLines {
		req.WriteString(h + "\r\n")
	}
	if chunked {
		req.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 64<<10)
			fmt.Fprintf(&req, "%x\r\n", n)
			req.Write(rest[:n])
			req.WriteString("\r\n")
			rest = rest[n:]
		}
		req.WriteString("0\r\n\r\n")
	} else {
		fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n", len(body))
		req.Write(body)
	}
	// The server may answer (413) before it read everything and close:
	// a write error is not the test's failure, the answer is.
	go func() { _, _ = conn.Write(req.Bytes()) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return testhttp.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// TestHostileHTTP sends malformed keys and oversized bodies to POST
// /invoices. Each is answered 4xx (the middleware's problem+json, or
// net/http's own 400 for bytes no header may hold), nothing is stored in
// the idem table, no invoice is created, and the server stays up.
func TestHostileHTTP(t *testing.T) {
	t.Parallel()
	dbURL, d := schemaDB(t, uniq("hostile"))
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: []string{"-log-level", "warn"}})
	addr := strings.TrimPrefix(p.URL(), "http://")
	customer := uniq("hostile")
	body := []byte(invoiceBody(customer, 100, 0))

	keyCases := []struct {
		name    string
		headers []string
	}{
		{"256 characters", []string{"Idempotency-Key: " + strings.Repeat("k", 256)}},
		{"4096 characters", []string{"Idempotency-Key: " + strings.Repeat("k", 4096)}},
		{"256 characters quoted", []string{`Idempotency-Key: "` + strings.Repeat("q", 256) + `"`}},
		{"empty", []string{"Idempotency-Key: "}},
		{"empty quoted", []string{`Idempotency-Key: ""`}},
		{"control character", []string{"Idempotency-Key: a\x01b"}},
		{"DEL", []string{"Idempotency-Key: a\x7fb"}},
		{"escape sequence", []string{"Idempotency-Key: \x1b[31mred"}},
		{"NUL", []string{"Idempotency-Key: a\x00b"}},
		{"invalid UTF-8", []string{"Idempotency-Key: a\xff\xfeb"}},
		{"UTF-8", []string{"Idempotency-Key: ключ"}},
		{"space inside", []string{"Idempotency-Key: a b"}},
		{"list", []string{"Idempotency-Key: a, b"}},
		{"list of strings", []string{`Idempotency-Key: "a", "b"`}},
		{"two header lines", []string{"Idempotency-Key: a", "Idempotency-Key: b"}},
		{"parameters", []string{`Idempotency-Key: "a";p=1`}},
		{"unterminated string", []string{`Idempotency-Key: "abc`}},
		{"bad escape", []string{`Idempotency-Key: "a\nb"`}},
		{"alias disagrees", []string{"Idempotency-Key: a", "X-Idempotency-Key: b"}},
		{"alias invalid", []string{"X-Idempotency-Key: " + strings.Repeat("x", 300)}},
		{"missing", nil},
	}
	for _, c := range keyCases {
		r := rawPost(t, addr, c.headers, body, false)
		if r.Status != http.StatusBadRequest {
			t.Errorf("key %s: %d %q, want 400", c.name, r.Status, r.Body)
			continue
		}
		if ct := r.Header.Get("Content-Type"); ct == "application/problem+json" {
			var prob struct {
				Type   string `json:"type"`
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal(r.Body, &prob); err != nil || prob.Status != 400 || prob.Detail == "" ||
				!strings.Contains(prob.Type, "#TypeInvalidKey") && !strings.Contains(prob.Type, "#TypeMissingKey") {
				t.Errorf("key %s: problem %s, want a clear invalid or missing key problem", c.name, r.Body)
			}
		} else if !strings.Contains(string(r.Body), "400 Bad Request") {
			// Refused by net/http before the middleware saw it.
			t.Errorf("key %s: 400 with Content-Type %q and body %q", c.name, ct, r.Body)
		}
	}

	huge := []byte(`{"customer":"` + customer + `","amount_cents":1,"x":"` + strings.Repeat("z", 2<<20) + `"}`)
	for _, chunked := range []bool{false, true} {
		r := rawPost(t, addr, []string{"Idempotency-Key: " + uniq("huge")}, huge, chunked)
		if r.Status != http.StatusRequestEntityTooLarge || !strings.Contains(string(r.Body), "#TypeBodyTooLarge") {
			t.Errorf("2 MiB body (chunked %v): %d %.200s, want 413 problem", chunked, r.Status, r.Body)
		}
	}

	if n := d.count(`SELECT count(*) FROM idem_keys`); n != 0 {
		t.Errorf("%d rows stored in idem_keys for requests that were refused", n)
	}
	if n := d.count(`SELECT count(*) FROM idemdemo_invoices`); n != 0 {
		t.Errorf("%d invoices created by requests that were refused", n)
	}
	assertUp(t, p)
	// And it still works.
	key := uniq("after")
	if r := mustPost(t, p.URL(), "/invoices", string(body), "Idempotency-Key", key); r.Status != http.StatusCreated {
		t.Fatalf("a valid request after the hostile ones: %d %s", r.Status, r.Body)
	}
}

// assertUp checks that the process runs and answers /healthz.
func assertUp(t *testing.T, p *demoproc.Process) {
	t.Helper()
	if !p.Alive() {
		t.Fatal("the demo died")
	}
	req, _ := http.NewRequest(http.MethodGet, p.URL()+"/healthz", nil)
	r, err := testhttp.Do(testhttp.NewClient(30*time.Second), req)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("/healthz: %+v %v", r, err)
	}
}

// mcpSession is an initialized MCP session on the demo.
type mcpSession struct {
	t      *testing.T
	base   string
	id     string
	header []string // extra headers on every request (credentials)
}

const mcpProtocol = "2025-06-18"

func newMCPSession(t *testing.T, base string, header ...string) *mcpSession {
	t.Helper()
	s := &mcpSession{t: t, base: base, header: header}
	r := s.postRaw(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+mcpProtocol+`","capabilities":{},"clientInfo":{"name":"faults","version":"1"}}}`, nil)
	s.id = r.Header.Get("Mcp-Session-Id")
	if r.Status != http.StatusOK || s.id == "" {
		t.Fatalf("initialize: %d %s (session %q)", r.Status, r.Body, s.id)
	}
	if r := s.postRaw(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil); r.Status != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s", r.Status, r.Body)
	}
	return s
}

func (s *mcpSession) postRaw(body string, ctx context.Context) testhttp.Response {
	s.t.Helper()
	if ctx == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
	}
	h := append([]string{"Accept", "application/json, text/event-stream", "MCP-Protocol-Version", mcpProtocol}, s.header...)
	if s.id != "" {
		h = append(h, "Mcp-Session-Id", s.id)
	}
	r, err := testhttp.Post(ctx, testhttp.NewClient(time.Minute), s.base+"/mcp", body, h...)
	if err != nil {
		s.t.Fatalf("POST /mcp: %v", err)
	}
	return r
}

// rpcMessage is a JSON-RPC response.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Result *struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Reason string `json:"reason"`
		} `json:"data"`
	} `json:"error"`
}

// messages returns the JSON-RPC messages of an answer, JSON or SSE.
func messages(r testhttp.Response) []rpcMessage {
	var out []rpcMessage
	if strings.HasPrefix(r.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(r.Body), "\n") {
			if data, ok := strings.CutPrefix(line, "data:"); ok {
				var m rpcMessage
				if json.Unmarshal([]byte(strings.TrimSpace(data)), &m) == nil {
					out = append(out, m)
				}
			}
		}
		return out
	}
	var m rpcMessage
	if json.Unmarshal(r.Body, &m) == nil {
		out = append(out, m)
	}
	return out
}

// toolCall is a tools/call body for create_invoice.
func toolCall(id, customer string, amount int64, delayMS int, meta string) string {
	args, _ := json.Marshal(map[string]any{"customer": customer, "amount_cents": amount, "delay_ms": delayMS})
	params := `{"name":"create_invoice","arguments":` + string(args)
	if meta != "" {
		params += `,"_meta":` + meta
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":` + params + `}}`
}

// TestHostileMCP sends malformed JSON-RPC to /mcp: broken JSON, batches,
// ids that are not ids, _meta and _meta.idempotencyKey of the wrong type or
// form. Each is refused with a 4xx or a JSON-RPC error, no key is stored, the
// tool does not run (no invoice), and the server stays up. Then ids of every
// valid JSON-RPC type do run, once each.
func TestHostileMCP(t *testing.T) {
	t.Parallel()
	dbURL, d := schemaDB(t, uniq("hostile-mcp"))
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: []string{"-log-level", "warn", "-lease", "2s"}})
	s := newMCPSession(t, p.URL())
	customer := uniq("mcp")

	refused := []struct{ name, body string }{
		{"malformed JSON", `{"jsonrpc":"2.0","id":1,"method":"tools/call",`},
		{"not JSON at all", "\xff\xfe\x00garbage"},
		{"batch", "[" + toolCall("2", customer, 1, 0, "") + "," + toolCall("3", customer, 1, 0, "") + "]"},
		{"empty batch", `[]`},
		{"id null", toolCall("null", customer, 1, 0, "")},
		{"id true", toolCall("true", customer, 1, 0, "")},
		{"id object", toolCall(`{"a":1}`, customer, 1, 0, "")},
		{"id array", toolCall(`[1]`, customer, 1, 0, "")},
		{"id out of float range", toolCall("1e400", customer, 1, 0, "")},
		{"no jsonrpc member", strings.Replace(toolCall("4", customer, 1, 0, ""), `"jsonrpc":"2.0",`, "", 1)},
		{"params not an object", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":[1,2]}`},
		{"_meta a string", toolCall("6", customer, 1, 0, `"str"`)},
		{"_meta an array", toolCall("7", customer, 1, 0, `[1]`)},
		{"idempotencyKey a number", toolCall("8", customer, 1, 0, `{"idempotencyKey":5}`)},
		{"idempotencyKey an object", toolCall("9", customer, 1, 0, `{"idempotencyKey":{"k":"v"}}`)},
		{"idempotencyKey empty", toolCall("10", customer, 1, 0, `{"idempotencyKey":""}`)},
		{"idempotencyKey 256 characters", toolCall("11", customer, 1, 0, `{"idempotencyKey":"`+strings.Repeat("k", 256)+`"}`)},
		{"idempotencyKey control character", toolCall("12", customer, 1, 0, `{"idempotencyKey":"a\u0001b"}`)},
		{"idempotencyKey non-ASCII", toolCall("13", customer, 1, 0, `{"idempotencyKey":"ключ"}`)},
		{"tool name a number", `{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":5,"arguments":{}}}`},
		{"unknown tool", `{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"drop_tables","arguments":{}}}`},
		{"invalid arguments", toolCall("16", customer, -5, 0, `{"idempotencyKey":"`+uniq("neg")+`"}`)},
	}
	for _, c := range refused {
		r := s.postRaw(c.body, nil)
		switch {
		case r.Status >= 400 && r.Status < 500:
		case r.Status == http.StatusOK:
			msgs := messages(r)
			if len(msgs) != 1 || (msgs[0].Error == nil && (msgs[0].Result == nil || !msgs[0].Result.IsError)) {
				t.Errorf("%s: 200 %s, want a JSON-RPC error (or a tool error)", c.name, r.Body)
			}
		default:
			t.Errorf("%s: %d %s, want 4xx or a JSON-RPC error", c.name, r.Status, r.Body)
		}
	}
	// An invalid _meta.idempotencyKey is named as such.
	for _, meta := range []string{`{"idempotencyKey":5}`, `{"idempotencyKey":""}`, `{"idempotencyKey":"a\u0001b"}`} {
		msgs := messages(s.postRaw(toolCall("20", customer, 1, 0, meta), nil))
		if len(msgs) != 1 || msgs[0].Error == nil || msgs[0].Error.Code != -32602 || msgs[0].Error.Data.Reason != "invalid_idempotency_key" {
			t.Errorf("_meta %s: %+v, want -32602 invalid_idempotency_key", meta, msgs)
		}
	}
	// Numeric ids go-sdk would answer under another id (a fraction, an
	// integer beyond 2^53 that its float64 rounds) are refused before the
	// tool runs, with the id echoed.
	for _, id := range []string{"1.5", "123456789012345678901234567890", "9007199254740993"} {
		r := s.postRaw(toolCall(id, customer, 1, 0, ""), nil)
		msgs := messages(r)
		if r.Status != http.StatusBadRequest || len(msgs) != 1 || msgs[0].Error == nil ||
			msgs[0].Error.Code != -32600 || msgs[0].Error.Data.Reason != "unsupported_id" || !jsonEqual(msgs[0].ID, []byte(id)) {
			t.Errorf("id %s: %d %s, want 400 with -32600 unsupported_id", id, r.Status, r.Body)
		}
	}
	if invs := d.invoicesOf(customer); len(invs) != 0 {
		t.Errorf("refused calls created invoices: %+v", invs)
	}
	// A refused call stores nothing; the only rows are those of the tool
	// error (invalid arguments), a recorded answer: one mcphttp row and
	// one REST row for its 400.
	if n := d.count(`SELECT count(*) FROM idem_keys WHERE state = 'claimed'`); n != 0 {
		t.Errorf("%d claims left behind by refused calls", n)
	}
	if n := d.count(`SELECT count(*) FROM idem_keys`); n > 2 {
		t.Errorf("%d rows in idem_keys after refused calls, want at most the 2 of the tool error", n)
	}
	assertUp(t, p)

	// Ids of every JSON-RPC type run the tool once, and their retry (same
	// id, same session) replays with the id as sent.
	for i, id := range []string{`"str-id"`, `""`, `"ключ \u0000 \"quoted\""`, `0`, `-7`, `42`, `9007199254740991`} {
		cust := fmt.Sprintf("%s-id-%d", customer, i)
		first := messages(s.postRaw(toolCall(id, cust, 1, 0, ""), nil))
		again := messages(s.postRaw(toolCall(id, cust, 1, 0, ""), nil))
		if len(first) != 1 || first[0].Result == nil || first[0].Result.IsError {
			t.Errorf("id %s: %+v, want a result", id, first)
			continue
		}
		if !jsonEqual(first[0].ID, []byte(id)) || len(again) != 1 || !jsonEqual(again[0].ID, []byte(id)) {
			t.Errorf("id %s: answered with ids %s and %v", id, first[0].ID, again)
		}
		if invs := d.invoicesOf(cust); len(invs) != 1 {
			t.Errorf("id %s: %d invoices after a call and its retry, want 1", id, len(invs))
		}
	}
	assertUp(t, p)
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// TestMCPStreamCut cuts a tools/call's answer short: once before the first
// byte (the client hangs up while the tool runs) and once in the middle of
// the SSE stream (after its headers and a few bytes of the event). The
// client retries with the same _meta.idempotencyKey until it has a result:
// exactly one invoice each time, the retry's result names it, and the server
// stays up.
func TestMCPStreamCut(t *testing.T) {
	t.Parallel()
	dbURL, d := schemaDB(t, uniq("sse-cut"))
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: []string{"-log-level", "warn", "-lease", "2s", "-sweep-interval", "1s", "-wait", "500ms"}})
	s := newMCPSession(t, p.URL())

	open := func(ctx context.Context, body string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.URL()+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", mcpProtocol)
		req.Header.Set("Mcp-Session-Id", s.id)
		return testhttp.NewClient(0).Do(req)
	}
	retryUntilResult := func(t *testing.T, customer string, delayMS int, meta string) {
		t.Helper()
		var final []rpcMessage
		waitFor(t, "a result for the retried call", time.Minute, func() bool {
			final = messages(s.postRaw(toolCall("2", customer, 100, delayMS, meta), nil))
			return len(final) == 1 && final[0].Result != nil && !final[0].Result.IsError
		})
		invs := d.invoicesOf(customer)
		if len(invs) != 1 {
			t.Fatalf("%d invoices after a cut answer and retries, want 1: %+v", len(invs), invs)
		}
		if got := toolInvoice(t, final); got != invs[0] {
			t.Fatalf("the retry's result names %+v, the invoice is %+v", got, invs[0])
		}
		again := messages(s.postRaw(toolCall("3", customer, 100, delayMS, meta), nil))
		if len(again) != 1 || again[0].Result == nil || string(again[0].Result.StructuredContent) != string(final[0].Result.StructuredContent) {
			t.Fatalf("replay after the cut: %+v", again)
		}
		if n := len(d.invoicesOf(customer)); n != 1 {
			t.Fatalf("%d invoices after the replay, want 1", n)
		}
	}

	t.Run("before the first byte", func(t *testing.T) {
		customer, key := uniq("cut"), uniq("cut-key")
		meta := `{"idempotencyKey":"` + key + `"}`
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			resp, err := open(ctx, toolCall("1", customer, 100, 1000, meta))
			if err == nil {
				resp.Body.Close()
				err = fmt.Errorf("answered %s before the cut", resp.Status)
			}
			done <- err
		}()
		waitFor(t, "the call to be claimed", time.Minute, func() bool {
			return d.count(`SELECT count(*) FROM idem_keys WHERE key = $1 AND state = 'claimed'`, "key/"+key) > 0
		})
		cancel()
		if err := <-done; err == nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("the cut request: %v, want it cancelled before its answer", err)
		}
		retryUntilResult(t, customer, 1000, meta)
	})

	t.Run("in the middle of the SSE stream", func(t *testing.T) {
		customer, key := uniq("cut"), uniq("cut-key")
		meta := `{"idempotencyKey":"` + key + `"}`
		resp, err := open(t.Context(), toolCall("1", customer, 100, 0, meta))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body.Close()
			t.Fatalf("tools/call: %s %s, want an SSE stream", resp.Status, resp.Header.Get("Content-Type"))
		}
		part := make([]byte, 12)
		if _, err := io.ReadFull(resp.Body, part); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // hang up mid-event
		retryUntilResult(t, customer, 0, meta)
	})
	assertUp(t, p)
}
