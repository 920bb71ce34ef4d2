package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/agentkey"
	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/middleware"
)

const acme = `{"customer":"acme","amount_cents":1200}`

// The REST contract against PostgreSQL: create, replay, mismatch,
// validation, missing key, and the count of side effects.
func TestInvoicesPostgres(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgURL(t)
	d := startDemo(t, dbURL)

	first := d.do("POST", "/invoices", "order-1", acme)
	mustStatus(t, "create", first, http.StatusCreated)
	var inv Invoice
	if err := json.Unmarshal(first.body, &inv); err != nil {
		t.Fatalf("invoice JSON: %v in %s", err, first.body)
	}
	if inv.ID <= 0 || inv.Customer != "acme" || inv.AmountCents != 1200 {
		t.Fatalf("created %+v, want acme 1200 with an id", inv)
	}
	if got := first.header.Get("Idempotent-Replayed"); got != "" {
		t.Fatalf("first response has Idempotent-Replayed %q", got)
	}

	retry := d.do("POST", "/invoices", "order-1", acme)
	mustStatus(t, "retry", retry, http.StatusCreated)
	if string(retry.body) != string(first.body) {
		t.Fatalf("retry body %s, want the original %s", retry.body, first.body)
	}
	if got := retry.header.Get("Idempotent-Replayed"); got != "true" {
		t.Fatalf("retry Idempotent-Replayed %q, want true", got)
	}

	changed := d.do("POST", "/invoices", "order-1", `{"customer":"acme","amount_cents":1300}`)
	mustStatus(t, "changed body", changed, http.StatusUnprocessableEntity)
	if typ := problemType(t, changed); typ != middleware.TypeMismatch {
		t.Fatalf("changed body: problem type %s", typ)
	}

	missing := d.do("POST", "/invoices", "", acme)
	mustStatus(t, "no key", missing, http.StatusBadRequest)
	if typ := problemType(t, missing); typ != middleware.TypeMissingKey {
		t.Fatalf("no key: problem type %s", typ)
	}

	for _, tc := range []struct{ key, body string }{
		{"bad-1", `{"customer":"acme"`},
		{"bad-2", `{"customer":"","amount_cents":5}`},
		{"bad-3", `{"customer":"acme","amount_cents":0}`},
		{"bad-4", `{"customer":"acme","amount_cents":-5}`},
		{"bad-5", `{"customer":"acme","amount_cents":5,"extra":1}`},
	} {
		r := d.do("POST", "/invoices", tc.key, tc.body)
		mustStatus(t, "invalid "+tc.body, r, http.StatusBadRequest)
		problemType(t, r)
		// The 400 is recorded like any answer below 500: its retry is a
		// replay.
		again := d.do("POST", "/invoices", tc.key, tc.body)
		mustStatus(t, "invalid retry "+tc.body, again, http.StatusBadRequest)
		if again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(r.body) {
			t.Fatalf("retry of invalid %s: replayed %q, body %s", tc.body, again.header.Get("Idempotent-Replayed"), again.body)
		}
	}

	second := d.do("POST", "/invoices", "order-2", acme)
	mustStatus(t, "second key", second, http.StatusCreated)
	if invs := d.invoices(); len(invs) != 2 {
		t.Fatalf("%d invoices, want 2 (one per key): %+v", len(invs), invs)
	}
}

// A duplicate of a slow request waits for it and gets its result; on an
// instance with no wait it gets 409 with Retry-After. A request still
// running when the shutdown bound runs out is cancelled and its claim
// released, so the key runs again.
func TestInFlightAndShutdownRelease(t *testing.T) {
	t.Parallel()
	dbURL, conn := pgURL(t)
	a := startDemo(t, dbURL, "-wait", "1m")
	b := startDemo(t, dbURL, "-wait", "-1s", "-shutdown-timeout", "200ms")

	// A waiting duplicate gets the original's response.
	slow := `{"customer":"slow","amount_cents":7,"delay_ms":1500}`
	orig := make(chan response, 1)
	go func() { orig <- a.do("POST", "/invoices", "slow-1", slow) }()
	waitForInFlight(t, conn, "key/slow-1")
	dup := a.do("POST", "/invoices", "slow-1", slow)
	first := <-orig
	mustStatus(t, "original", first, http.StatusCreated)
	mustStatus(t, "waiting duplicate", dup, http.StatusCreated)
	if string(dup.body) != string(first.body) || dup.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("duplicate got %s (replayed %q), want the original's %s replayed", dup.body, dup.header.Get("Idempotent-Replayed"), first.body)
	}

	// A request that outlives b's shutdown bound; its duplicate on b,
	// which does not wait, is answered 409.
	long := `{"customer":"long","amount_cents":9,"delay_ms":600000}`
	cancelled := make(chan response, 1)
	go func() { cancelled <- b.do("POST", "/invoices", "long-1", long) }()
	waitForInFlight(t, conn, "key/long-1")
	conflict := b.do("POST", "/invoices", "long-1", long)
	mustStatus(t, "in-flight duplicate", conflict, http.StatusConflict)
	if typ := problemType(t, conflict); typ != middleware.TypeInFlight {
		t.Fatalf("in-flight duplicate: problem type %s", typ)
	}
	if ra, err := strconv.Atoi(conflict.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("in-flight duplicate: Retry-After %q", conflict.header.Get("Retry-After"))
	}

	b.Stop()
	mustStatus(t, "request cancelled by shutdown", <-cancelled, http.StatusServiceUnavailable)
	// Released before b exited, not left to its 30s lease: the key is
	// absent now, and no invoice was created for it.
	var rows int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM idem_keys WHERE key = 'key/long-1'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("key/long-1 is still in the table after b exited: its claim was not released")
	}
	for _, inv := range a.invoices() {
		if inv.Customer == "long" {
			t.Fatalf("the cancelled request created an invoice: %+v", inv)
		}
	}
	// So the key runs again (without the delay: a released key has no
	// fingerprint to match).
	again := a.do("POST", "/invoices", "long-1", `{"customer":"long","amount_cents":9}`)
	mustStatus(t, "retry after release", again, http.StatusCreated)
	if again.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("retry after release was replayed; want a fresh run")
	}
	if invs := a.invoices(); len(invs) != 2 {
		t.Fatalf("%d invoices, want 2 (slow-1 once, long-1 once): %+v", len(invs), invs)
	}
}

// A completed result survives a restart of the process: the new process
// replays it byte for byte, over REST and over MCP (a new MCP session).
func TestRestartReplays(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgURL(t)
	a := startDemo(t, dbURL)
	first := a.do("POST", "/invoices", "restart-1", acme)
	mustStatus(t, "create", first, http.StatusCreated)
	mcpFirst := callTool(t, a, map[string]any{"customer": "mcp", "amount_cents": 500}, mcp.Meta{"idempotencyKey": "restart-mcp-1"})
	a.Stop()

	b := startDemo(t, dbURL)
	retry := b.do("POST", "/invoices", "restart-1", acme)
	mustStatus(t, "retry after restart", retry, http.StatusCreated)
	if string(retry.body) != string(first.body) {
		t.Fatalf("after restart: body %q, want %q", retry.body, first.body)
	}
	if retry.header.Get("Content-Type") != first.header.Get("Content-Type") || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after restart: headers %v, want the original Content-Type and Idempotent-Replayed", retry.header)
	}
	mcpRetry := callTool(t, b, map[string]any{"customer": "mcp", "amount_cents": 500}, mcp.Meta{"idempotencyKey": "restart-mcp-1"})
	if mcpRetry != mcpFirst {
		t.Fatalf("MCP after restart: %s, want %s", mcpRetry, mcpFirst)
	}
	if invs := b.invoices(); len(invs) != 2 {
		t.Fatalf("%d invoices, want 2: %+v", len(invs), invs)
	}
}

// callTool calls create_invoice in a new MCP session and returns its
// structured result as JSON, failing on a tool error.
func callTool(t *testing.T, d *demo, args map[string]any, meta mcp.Meta) string {
	t.Helper()
	res := callToolResult(t, d, args, meta)
	if res.IsError {
		t.Fatalf("create_invoice: tool error %s", toolText(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func callToolResult(t *testing.T, d *demo, args map[string]any, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	return callToolAt(t, d, "", args, meta)
}

// callToolAt calls create_invoice with go-sdk's client asking for protocol
// version (empty: the client's choice, 2026-07-28), and checks that is the
// version it got.
func callToolAt(t *testing.T, d *demo, version string, args map[string]any, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	client := mcp.NewClient(&mcp.Implementation{Name: "idemdemo-test", Version: "1.0.0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.URL() + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("MCP connect: %v", err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().ProtocolVersion; version != "" && got != version {
		t.Fatalf("MCP connect: protocol %s, want %s", got, version)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_invoice", Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("create_invoice: %v", err)
	}
	return res
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// The MCP tool: the same _meta.idempotencyKey creates one invoice, and the
// tool forwards _meta.sessionId as X-Session-Id and the call's key, bound to
// the caller, as X-Idempotency-Key, so the REST API itself recognises the
// call, end to end.
func TestMCPTool(t *testing.T) {
	t.Parallel()
	dbURL, conn := pgURL(t)
	d := startDemo(t, dbURL)
	const key = "4f1c0c5e0b8f2a1d9e7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e"
	args := map[string]any{"customer": "mcp", "amount_cents": 4200}
	meta := mcp.Meta{"sessionId": "conv-1", "idempotencyKey": key}

	first := callTool(t, d, args, meta)
	second := callTool(t, d, args, meta)
	if first != second {
		t.Fatalf("second call %s, want the first's %s", second, first)
	}
	var out toolOutput
	if err := json.Unmarshal([]byte(first), &out); err != nil {
		t.Fatal(err)
	}
	if out.ID <= 0 || out.Customer != "mcp" || out.AmountCents != 4200 || out.Replayed {
		t.Fatalf("tool result %+v", out)
	}
	if invs := d.invoices(); len(invs) != 1 {
		t.Fatalf("%d invoices after two calls with one key, want 1: %+v", len(invs), invs)
	}

	// The client's key as sent is not what the tool forwards: a REST call
	// with it is another call, and cannot read the tool's invoice.
	rest := d.do("POST", "/invoices", "", `{"customer":"mcp","amount_cents":4200}`,
		"X-Session-Id", "conv-1", "X-Idempotency-Key", key)
	mustStatus(t, "REST call with the client's key", rest, http.StatusCreated)
	var inv Invoice
	if err := json.Unmarshal(rest.body, &inv); err != nil {
		t.Fatal(err)
	}
	if rest.header.Get("Idempotent-Replayed") == "true" || inv.ID == out.ID {
		t.Fatalf("REST call with the client's key: replayed %q, invoice %+v; want a new invoice, not the tool's %d",
			rest.header.Get("Idempotent-Replayed"), inv, out.ID)
	}

	// A different key is a different call; no key at all is keyed by
	// mcphttp (session and request id) before protocol 2026-07-28 and
	// still runs once. From 2026-07-28 on there is nothing to key it by
	// (no session, a new id per retry): the tool refuses to create an
	// invoice it could not protect upstream.
	callTool(t, d, args, mcp.Meta{"sessionId": "conv-1", "idempotencyKey": "another-key"})
	if res := callToolAt(t, d, "2025-11-25", map[string]any{"customer": "nokey", "amount_cents": 1}, nil); res.IsError {
		t.Fatalf("no key at 2025-11-25: %s", toolText(res))
	}
	if res := callToolAt(t, d, "2026-07-28", map[string]any{"customer": "nokey", "amount_cents": 1}, nil); !res.IsError {
		t.Fatalf("no key at 2026-07-28 created an invoice: %s", toolText(res))
	}
	if invs := d.invoices(); len(invs) != 4 {
		t.Fatalf("%d invoices, want 4: %+v", len(invs), invs)
	}

	// The API's 400 reaches the model as a tool error.
	bad := callToolResult(t, d, map[string]any{"customer": "mcp", "amount_cents": 0}, mcp.Meta{"idempotencyKey": "bad-amount"})
	if !bad.IsError || !strings.Contains(toolText(bad), "400") {
		t.Fatalf("invalid amount: IsError %v, text %q; want a tool error with the API's 400", bad.IsError, toolText(bad))
	}

	// Both layers counted: four calls ran the tool (each making one
	// upstream request that claimed), one MCP call was a replay, and the
	// REST call by hand claimed. mcphttp records a call after its response
	// reached the client, so the last completion may still be on its way.
	for series, want := range map[string]string{
		`idem_claimed_total{adapter="mcp"}`:   "4",
		`idem_completed_total{adapter="mcp"}`: "4",
		`idem_replayed_total{adapter="mcp"}`:  "1",
		`idem_claimed_total{adapter="http"}`:  "5",
	} {
		waitForMetric(t, d, series, want)
	}

	// The second layer: with mcphttp's record of the call gone (deleted,
	// and the process restarted, so no cache holds it either), the retry
	// runs the tool again, which forwards the same key, and the REST API
	// replays the invoice it created for the first run.
	if _, err := conn.Exec(t.Context(), `DELETE FROM idem_keys WHERE scope LIKE 'mcp:%'`); err != nil {
		t.Fatal(err)
	}
	d.Stop()
	d = startDemo(t, dbURL)
	var again toolOutput
	if err := json.Unmarshal([]byte(callTool(t, d, args, meta)), &again); err != nil {
		t.Fatal(err)
	}
	if again.ID != out.ID || !again.Replayed {
		t.Fatalf("the tool run again got %+v, want invoice %d replayed by the REST API", again, out.ID)
	}

	if invs := d.invoices(); len(invs) != 4 {
		t.Fatalf("%d invoices after the second layer's replay, want still 4: %+v", len(invs), invs)
	}
	waitForMetric(t, d, `idem_replayed_total{adapter="http"}`, "1")
}

// TestMCPToolProgress: a call that asks for progress (a progressToken) gets
// a notification before the invoice is created and one after, on the call's
// stream, at both protocol versions; a retry is the replay of the result.
func TestMCPToolProgress(t *testing.T) {
	t.Parallel()
	d := startDemo(t, "")
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		var mu sync.Mutex
		var got []string
		client := mcp.NewClient(&mcp.Implementation{Name: "progress", Version: "1"}, &mcp.ClientOptions{
			ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, fmt.Sprintf("%v %.0f/%.0f %s", req.Params.ProgressToken, req.Params.Progress, req.Params.Total, req.Params.Message))
			},
		})
		hc := &http.Client{Transport: &http.Transport{}}
		cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: d.URL() + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "create_invoice",
			Arguments: map[string]any{"customer": "progress " + version, "amount_cents": 5},
			Meta:      mcp.Meta{"progressToken": "p-" + version, "idempotencyKey": "progress-" + version}})
		cs.Close()
		hc.CloseIdleConnections()
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", version, err, res)
		}
		mu.Lock()
		want := []string{"p-" + version + " 0/1 creating the invoice", "p-" + version + " 1/1 invoice created"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: progress %q, want %q", version, got, want)
		}
		mu.Unlock()
	}
}

// TestMCPBothVersions: a 2025-11-25 client (a session) and a 2026-07-28
// client (no session, stateless) each create an invoice through /mcp with
// go-sdk's own client, and each one's repeated call, with the agent key
// agentkey.Derive derives, is a replay: one invoice per client.
func TestMCPBothVersions(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgURL(t)
	d := startDemo(t, dbURL)
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		args := map[string]any{"customer": "v" + version, "amount_cents": 700}
		raw, _ := json.Marshal(args)
		key, err := agentkey.Derive("conv-"+version, "1", "create_invoice", raw)
		if err != nil {
			t.Fatal(err)
		}
		meta := mcp.Meta{"sessionId": "conv-" + version, "idempotencyKey": key}
		first := callToolAt(t, d, version, args, meta)
		second := callToolAt(t, d, version, args, meta)
		if first.IsError || toolText(first) != toolText(second) {
			t.Fatalf("%s: %q then %q, want one result twice", version, toolText(first), toolText(second))
		}
	}
	if invs := d.invoices(); len(invs) != 2 {
		t.Fatalf("%d invoices, want one per client: %+v", len(invs), invs)
	}
}

// /healthz and /metrics, and a database that goes away: /healthz says 503
// and a POST is refused 503 without running the handler.
func TestHealthMetricsAndOutage(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	d := startDemo(t, u.String())

	h := d.do("GET", "/healthz", "", "")
	mustStatus(t, "healthz", h, http.StatusOK)
	if strings.TrimSpace(string(h.body)) != `{"status":"ok","store":"postgres"}` {
		t.Fatalf("healthz body %s", h.body)
	}
	// The container health check.
	if out, err := exec.Command(demoBinary, "-probe", d.URL()+"/healthz").CombinedOutput(); err != nil {
		t.Fatalf("-probe with the database up: %v %s", err, out)
	}

	mustStatus(t, "create", d.do("POST", "/invoices", "m-1", acme), http.StatusCreated)
	mustStatus(t, "retry", d.do("POST", "/invoices", "m-1", acme), http.StatusCreated)
	mustStatus(t, "mismatch", d.do("POST", "/invoices", "m-1", `{"customer":"x","amount_cents":1}`), http.StatusUnprocessableEntity)
	m := d.do("GET", "/metrics", "", "")
	mustStatus(t, "metrics", m, http.StatusOK)
	for series, want := range map[string]string{
		`idem_claimed_total{adapter="http"}`:                                      "1",
		`idem_completed_total{adapter="http"}`:                                    "1",
		`idem_replayed_total{adapter="http"}`:                                     "1",
		`idem_mismatched_total{adapter="http"}`:                                   "1",
		`idem_in_flight_total{adapter="http"}`:                                    "0",
		`idem_released_total{adapter="http"}`:                                     "0",
		`idem_stale_total{adapter="http"}`:                                        "0",
		`idem_swept_total{kind="abandoned"}`:                                      "0",
		`idem_swept_total{kind="expired"}`:                                        "0",
		`idem_claim_duration_seconds_count{adapter="http",outcome="claimed"}`:     "1",
		`idem_claim_duration_seconds_count{adapter="http",outcome="replayed"}`:    "1",
		`idem_handler_duration_seconds_count{adapter="http",outcome="completed"}`: "1",
	} {
		if got := metricValue(string(m.body), series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
	if t.Failed() {
		t.Fatalf("metrics:\n%s", m.body)
	}

	proxy.cut()
	down := d.do("GET", "/healthz", "", "")
	mustStatus(t, "healthz with the database down", down, http.StatusServiceUnavailable)
	if !strings.Contains(string(down.body), `"status":"unavailable"`) {
		t.Fatalf("healthz body %s", down.body)
	}
	if out, err := exec.Command(demoBinary, "-probe", d.URL()+"/healthz").CombinedOutput(); err == nil || !strings.Contains(string(out), "503") {
		t.Fatalf("-probe with the database down: %v %s; want a failure naming the 503", err, out)
	}
	refused := d.do("POST", "/invoices", "m-2", acme)
	mustStatus(t, "POST with the database down", refused, http.StatusServiceUnavailable)
	if typ := problemType(t, refused); typ != middleware.TypeStoreUnavailable {
		t.Fatalf("POST with the database down: problem type %s", typ)
	}
}

// waitForMetric polls /metrics until series has the value want, for at
// most a minute.
func waitForMetric(t *testing.T, d *demo, series, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := metricValue(string(d.do("GET", "/metrics", "", "").body), series)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q, want %s", series, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func metricValue(text, series string) string {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return rest
		}
	}
	return ""
}

// A process killed mid-request. POST /invoices claimed its key inside the
// transaction that inserts the invoice, which rolls back with the process's
// connections: nothing is left behind, and another instance runs the retry
// at once (the lease, 30s, never comes into it) with nothing to sweep. An
// MCP call's claim is the two-phase kind (the tool's side effect is an HTTP
// call): it is left until its lease runs out, then the other instance's
// sweeper releases it (and counts it), and the call runs again.
func TestCrashLeavesNothingOrASweptClaim(t *testing.T) {
	t.Parallel()
	dbURL, conn := pgURL(t)
	crashing := func(d *demo, send func()) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			send() // fails when d is killed; the answer does not matter
		}()
		t.Cleanup(func() { <-done })
	}

	a := startDemo(t, dbURL)
	crashing(a, func() {
		req, _ := http.NewRequest("POST", a.URL()+"/invoices", strings.NewReader(`{"customer":"crash","amount_cents":3,"delay_ms":600000}`))
		req.Header.Set("Idempotency-Key", "crash-1")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := a.client.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	waitForInFlight(t, conn, "key/crash-1")
	a.Kill()

	b := startDemo(t, dbURL, "-sweep-interval", "100ms")
	again := b.do("POST", "/invoices", "crash-1", `{"customer":"crash","amount_cents":3}`)
	mustStatus(t, "retry after the crash", again, http.StatusCreated)
	if again.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("the retry after the crash was replayed")
	}

	c := startDemo(t, dbURL, "-lease", "3s")
	crashing(c, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		hc := &http.Client{Transport: &http.Transport{}}
		defer hc.CloseIdleConnections()
		client := mcp.NewClient(&mcp.Implementation{Name: "idemdemo-test", Version: "1.0.0"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.URL() + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
		if err != nil {
			return
		}
		defer cs.Close()
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_invoice",
			Arguments: map[string]any{"customer": "crash-mcp", "amount_cents": 3, "delay_ms": 600000},
			Meta:      mcp.Meta{"idempotencyKey": "crash-mcp"}})
	})
	waitForState(t, conn, "key/crash-mcp", "claimed")
	c.Kill()
	waitForState(t, conn, "key/crash-mcp", "")
	waitForMetric(t, b, `idem_swept_total{kind="abandoned"}`, "1")
	callTool(t, b, map[string]any{"customer": "crash-mcp", "amount_cents": 3}, mcp.Meta{"idempotencyKey": "crash-mcp"})
	if invs := b.invoices(); len(invs) != 2 {
		t.Fatalf("%d invoices, want 2 (one per key): %+v", len(invs), invs)
	}
}

// Without a database the demo runs on memstore, and says so.
func TestMemoryMode(t *testing.T) {
	t.Parallel()
	d := startDemo(t, "")
	if !strings.Contains(d.Stdout().String(), "(store: memory)") || !strings.Contains(d.Stderr().String(), "NO DATABASE") {
		t.Fatalf("memory mode is not announced; stdout:\n%s\nstderr:\n%s", d.Stdout().String(), d.Stderr().String())
	}
	first := d.do("POST", "/invoices", "mem-1", acme)
	mustStatus(t, "create", first, http.StatusCreated)
	retry := d.do("POST", "/invoices", "mem-1", acme)
	if string(retry.body) != string(first.body) || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %s replayed %q", retry.body, retry.header.Get("Idempotent-Replayed"))
	}
	out := callTool(t, d, map[string]any{"customer": "mcp", "amount_cents": 1}, mcp.Meta{"idempotencyKey": "mem-mcp"})
	if again := callTool(t, d, map[string]any{"customer": "mcp", "amount_cents": 1}, mcp.Meta{"idempotencyKey": "mem-mcp"}); again != out {
		t.Fatalf("MCP retry %s, want %s", again, out)
	}
	if invs := d.invoices(); len(invs) != 2 {
		t.Fatalf("%d invoices, want 2: %+v", len(invs), invs)
	}
	h := d.do("GET", "/healthz", "", "")
	mustStatus(t, "healthz", h, http.StatusOK)
	if strings.TrimSpace(string(h.body)) != `{"status":"ok","store":"memory"}` {
		t.Fatalf("healthz body %s", h.body)
	}
}

// The demo says at start whether it migrated anything: the first start on
// an empty schema applies the migrations and creates the invoices table,
// the next finds nothing to do, and with -migrate=false it says it did not
// look.
func TestLogsWhatItMigrated(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgURL(t)
	first := startDemo(t, dbURL)
	first.Stop()
	log := first.Stderr().String()
	if !strings.Contains(log, `msg="migrated the idem table"`) || !strings.Contains(log, "applied=") ||
		!strings.Contains(log, `msg="created the invoices table"`) {
		t.Fatalf("first start on an empty schema does not say it migrated:\n%s", log)
	}
	second := startDemo(t, dbURL)
	second.Stop()
	log = second.Stderr().String()
	if !strings.Contains(log, `msg="idem table up to date; nothing to migrate"`) || strings.Contains(log, "created the invoices table") {
		t.Fatalf("second start does not say there was nothing to migrate:\n%s", log)
	}
	third := startDemo(t, dbURL, "-migrate=false")
	third.Stop()
	if log = third.Stderr().String(); !strings.Contains(log, "not migrating") {
		t.Fatalf("-migrate=false does not say it skipped migrating:\n%s", log)
	}
}

// With -migrate=false on a database nobody migrated, the demo starts (a
// least-privilege role cannot migrate) but /healthz reports the missing
// table, and requests are refused rather than run unprotected.
func TestNoMigrateReportsMissingTable(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgURL(t)
	d := startDemo(t, dbURL, "-migrate=false")
	h := d.do("GET", "/healthz", "", "")
	mustStatus(t, "healthz without the table", h, http.StatusServiceUnavailable)
	if !strings.Contains(string(h.body), "idem_keys") {
		t.Fatalf("healthz body %s does not name the table", h.body)
	}
	mustStatus(t, "POST without the table", d.do("POST", "/invoices", "k", acme), http.StatusServiceUnavailable)
}

// A database URL that does not work stops the demo at start with a clear
// message and a failure exit.
func TestBadDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"postgres://idem:idem@127.0.0.1:port/x", "not a valid PostgreSQL URL"},
		{"postgres://idem:idem@127.0.0.1:1/x?sslmode=disable&connect_timeout=5", "cannot connect to PostgreSQL at 127.0.0.1:1 (user \"idem\", database \"x\"): connect: connection refused"},
	} {
		cmd := exec.Command(demoBinary, "-addr", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+tc.url)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%s: the demo started", tc.url)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Fatalf("%s: output %q, want it to contain %q", tc.url, out, tc.want)
		}
		if strings.Contains(string(out), "idem:idem@") {
			t.Fatalf("%s: the password is printed: %q", tc.url, out)
		}
	}
}

// An open MCP stream (GET /mcp, which lasts as long as the client wants)
// does not hold shutdown until its bound: it is ended when shutdown begins.
func TestShutdownEndsMCPStreams(t *testing.T) {
	t.Parallel()
	d := startDemo(t, "", "-shutdown-timeout", "10m")
	post := func(body string, header ...string) *http.Response {
		req, _ := http.NewRequest("POST", d.URL()+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	init := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := init.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: no Mcp-Session-Id (%s)", init.Status)
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id", sid, "MCP-Protocol-Version", "2025-06-18")

	req, _ := http.NewRequest("GET", d.URL()+"/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	stream, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET /mcp: %s", stream.Status)
	}
	// The stream is open on the server. Shutting down ends it, and the
	// process exits without reaching its ten-minute bound.
	d.Stop()
	if _, err := io.Copy(io.Discard, stream.Body); err != nil {
		t.Logf("stream ended with %v", err)
	}
	if strings.Contains(d.Stderr().String(), "shutdown bound reached") {
		t.Fatalf("shutdown waited for the stream until its bound:\n%s", d.Stderr().String())
	}
}

// run in-process: it serves until its context is cancelled, then returns
// nil with no goroutine left behind (goleak in TestMain).
func TestRunInProcess(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	lines := make(chan string, 10)
	stdout := writerFunc(func(p []byte) (int, error) {
		lines <- string(p)
		return len(p), nil
	})
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, func(string) string { return "" }, stdout, io.Discard)
	}()
	var base string
	select {
	case line := <-lines:
		u, ok := demoproc.ListeningURL(line)
		if !ok {
			t.Fatalf("first line %q", line)
		}
		base = u
	case err := <-done:
		t.Fatalf("run returned %v before listening", err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("POST", base+"/invoices", strings.NewReader(acme))
	req.Header.Set("Idempotency-Key", "in-process")
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %s", resp.Status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// With -two-phase, POST /invoices claims its key on its own first: the
// claim is in the table, visible, while the handler runs, and the invoice
// and its response commit in a second transaction. A duplicate waits for
// it and replays it; one invoice.
func TestTwoPhase(t *testing.T) {
	t.Parallel()
	dbURL, conn := pgURL(t)
	d := startDemo(t, dbURL, "-two-phase", "-wait", "1m")
	slow := `{"customer":"two","amount_cents":7,"delay_ms":1000}`
	orig := make(chan response, 1)
	go func() { orig <- d.do("POST", "/invoices", "two-1", slow) }()
	waitForState(t, conn, "key/two-1", "claimed")
	dup := d.do("POST", "/invoices", "two-1", slow)
	first := <-orig
	mustStatus(t, "original", first, http.StatusCreated)
	if string(dup.body) != string(first.body) || dup.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("duplicate got %s (replayed %q), want the original's %s replayed", dup.body, dup.header.Get("Idempotent-Replayed"), first.body)
	}
	if invs := d.invoices(); len(invs) != 1 {
		t.Fatalf("%d invoices, want 1: %+v", len(invs), invs)
	}
}
