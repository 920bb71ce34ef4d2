package mcphttp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/pgstore"
)

// txHarness is a harness whose store is pgstore on a fresh, migrated
// schema, with every tool claimed in a transaction (Options.InTransactionTools).
func txHarness(t *testing.T, wrap mcphttp.Options) (*harness, *pgxpool.Pool) {
	t.Helper()
	pool, _ := testdb.Pool(t)
	store := teststore.Migrated(t, pool, pgstore.Options{})
	wrap.InTransactionTools = func(string) bool { return true }
	return newHarness(t, harnessOptions{store: store, wrap: wrap}), pool
}

// callAsync sends a tools/call from another goroutine; its one response
// comes on the channel (a zero message if there was none, the failure
// reported), which is closed after it.
func (h *harness) callAsync(t *testing.T, session string, id int, tool, key string) <-chan rpcMessage {
	done := make(chan rpcMessage, 1)
	body := callBody(id, tool, textArgs{Text: "a"}, map[string]any{"idempotencyKey": key})
	go func() {
		defer close(done)
		req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", protocolVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("tools/call %d: %v", id, err)
			done <- rpcMessage{}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(raw)) {
			data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
			var m rpcMessage
			if ok && json.Unmarshal([]byte(data), &m) == nil && m.Method == "" {
				m.raw = data
				done <- m
				return
			}
		}
		t.Errorf("tools/call %d: HTTP %d with no response: %s", id, resp.StatusCode, raw)
		done <- rpcMessage{}
	}()
	return done
}

// returned is closed once ch, a callAsync's channel, is closed; the
// response stays on ch.
func returned(ch <-chan rpcMessage) (<-chan rpcMessage, <-chan struct{}) {
	out, closed := make(chan rpcMessage, 1), make(chan struct{})
	go func() {
		for m := range ch {
			out <- m
		}
		close(closed)
	}()
	return out, closed
}

// TestInTransactionDuplicateOutwaitsMaxExecution: a duplicate of a call
// whose transaction is open waits for it up to Wait (30 s by default),
// even though MaxExecution, which bounds the statements of a claim's
// transaction, is much shorter; it gets the original's answer once that
// commits, and, with a shorter Wait that runs out first, CodeInFlight.
// (The original outlives its MaxExecution idle: IdleInTransaction, which
// would otherwise be MaxExecution, lets it.)
func TestInTransactionDuplicateOutwaitsMaxExecution(t *testing.T) {
	t.Parallel()
	const maxExecution, idle = 100 * time.Millisecond, 30 * time.Second
	t.Run("the original commits", func(t *testing.T) {
		t.Parallel()
		h, pool := txHarness(t, mcphttp.Options{Engine: engine.Options{MaxExecution: maxExecution, IdleInTransaction: idle}})
		session := h.initialize(t)
		first := h.callAsync(t, session, 1, "gate", "k")
		<-h.entered
		dup, dupReturned := returned(h.callAsync(t, session, 2, "gate", "k"))
		if !testdb.WaitBlockedFor(t, pool, "idem_keys", 3*maxExecution, dupReturned) {
			close(h.gate)
			<-first
			t.Fatalf("the duplicate was answered %s while the original was still open", (<-dup).raw)
		}
		close(h.gate)
		a, b := <-first, <-dup
		if a.text() == "" || b.text() != a.text() || !b.replayed() || h.runs.get("gate:a") != 1 {
			t.Fatalf("original %s, duplicate %s, %d runs; want the original's result replayed, one run", a.raw, b.raw, h.runs.get("gate:a"))
		}
	})
	t.Run("the wait runs out", func(t *testing.T) {
		t.Parallel()
		const wait = 4 * maxExecution
		h, _ := txHarness(t, mcphttp.Options{Engine: engine.Options{MaxExecution: maxExecution, IdleInTransaction: idle, Wait: wait}})
		session := h.initialize(t)
		first := h.callAsync(t, session, 1, "gate", "k")
		defer func() { close(h.gate); <-first }()
		<-h.entered
		began := time.Now()
		m := <-h.callAsync(t, session, 2, "gate", "k")
		if m.Error == nil || m.Error.Code != mcphttp.CodeInFlight || m.Error.Data.Reason != mcphttp.ReasonInFlight {
			t.Fatalf("the duplicate: %s; want CodeInFlight, in_flight", m.raw)
		}
		if took := time.Since(began); took < wait-testdb.ClockSlack {
			t.Errorf("answered after %v, before the wait of %v ran out", took, wait)
		}
	})
}

// TestInTransactionEndedByTheDatabase: a tool in InTransaction that pauses
// between two statements longer than IdleInTransaction loses its
// transaction to PostgreSQL; whatever the tool answers then (the error of
// its next statement as a tool error, which go-sdk answers with isError
// and the wrapper records, or a JSON-RPC error saying to retry, which it
// does not), nothing commits, and the client gets CodeInternalError with
// data.reason transaction_limit and a message naming the setting to
// raise, not a result, nor "retry": its retry ends the same way. (The log,
// the engine's, is checked by the middleware's test of the same name.)
func TestInTransactionEndedByTheDatabase(t *testing.T) {
	t.Parallel()
	const idle = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool, _ := testdb.Pool(t)
	store := teststore.Migrated(t, pool, pgstore.Options{}, `CREATE TABLE invoices (id bigserial PRIMARY KEY)`)
	server := mcp.NewServer(&mcp.Implementation{Name: "mcphttp-tx-limit-test", Version: "1"}, nil)
	pause := func(toolError bool) mcp.ToolHandlerFor[textArgs, any] {
		return func(ctx context.Context, req *mcp.CallToolRequest, _ textArgs) (*mcp.CallToolResult, any, error) {
			ctx = mcphttp.TxContext(ctx, req)
			tx := pgstore.TxFrom(ctx)
			if _, err := tx.Exec(ctx, `INSERT INTO invoices DEFAULT VALUES`); err != nil {
				return nil, nil, err
			}
			time.Sleep(3 * idle) // a real pause: PostgreSQL's clock measures it
			if _, err := tx.Exec(ctx, `INSERT INTO invoices DEFAULT VALUES`); err != nil {
				if toolError {
					return nil, nil, err
				}
				return nil, nil, &jsonrpc.Error{Code: -32000, Message: "database unavailable, retry"}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		}
	}
	mcp.AddTool(server, &mcp.Tool{Name: "pause_tool_error"}, pause(true))
	mcp.AddTool(server, &mcp.Tool{Name: "pause_rpc_error"}, pause(false))
	wrapped := mcphttp.New(store, mcphttp.Options{
		InTransactionTools: func(string) bool { return true },
		Engine:             engine.Options{IdleInTransaction: idle},
	})(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	srv := httptest.NewServer(wrapped)
	t.Cleanup(srv.Close) // after the session's DELETE, which initialize registers
	h := &harness{url: srv.URL}
	session := h.initialize(t)
	id := 0
	for _, tool := range []string{"pause_tool_error", "pause_rpc_error"} {
		for range 2 { // the retry ends the same way
			id++
			m := h.call(t, session, id, tool, textArgs{}, map[string]any{"idempotencyKey": tool})
			if m.Error == nil || m.Error.Code != mcphttp.CodeInternalError || m.Error.Data.Reason != mcphttp.ReasonTransactionLimit ||
				!strings.Contains(m.Error.Message, "IdleInTransaction") {
				t.Fatalf("%s: %s; want CodeInternalError, transaction_limit, naming IdleInTransaction", tool, m.raw)
			}
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d invoices (%v), want 0", n, err)
	}
}
