package mcphttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// TestInTransaction: a tool whose side effect is a row in the store's
// database (Options.InTransaction) writes it in the transaction its call
// was claimed in, and the row and the call's response commit together: a
// retry replays the response and finds one row; a call that answers a
// JSON-RPC error leaves nothing, and its retry runs the tool again. A tool
// left out of InTransaction is claimed on its own and gets no transaction.
func TestInTransaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool, _ := testdb.Pool(t)
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id bigserial PRIMARY KEY, customer text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)

	var runs, failures atomic.Int64
	server := mcp.NewServer(&mcp.Implementation{Name: "mcphttp-tx-test", Version: "1"}, nil)
	insert := func(ctx context.Context, req *mcp.CallToolRequest, customer string) (int64, error) {
		ctx = mcphttp.TxContext(ctx, req)
		tx := pgstore.TxFrom(ctx)
		if tx == nil {
			return 0, fmt.Errorf("no transaction in the tool's context")
		}
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO invoices (customer) VALUES ($1) RETURNING id`, customer).Scan(&id)
		return id, err
	}
	mcp.AddTool(server, &mcp.Tool{Name: "create"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		id, err := insert(ctx, req, in.Text)
		if err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("invoice %d", id)}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "create_then_fail"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		failures.Add(1)
		if _, err := insert(ctx, req, in.Text); err != nil {
			return nil, nil, err
		}
		return nil, nil, &jsonrpc.Error{Code: -32000, Message: "failed after the insert"}
	})
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	mcp.AddTool(server, &mcp.Tool{Name: "gated"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		id, err := insert(ctx, req, in.Text)
		if err != nil {
			return nil, nil, err
		}
		entered <- struct{}{}
		<-gate
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("invoice %d", id)}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "elsewhere"}, func(ctx context.Context, req *mcp.CallToolRequest, _ textArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("transaction %v", pgstore.TxFrom(mcphttp.TxContext(ctx, req)) != nil)}}}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	wrapped := mcphttp.New(store, mcphttp.Options{InTransaction: func(tool string) bool { return tool != "elsewhere" }})(inner)
	srv := httptest.NewServer(wrapped)
	defer srv.Close()

	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(tool, key string) (string, error) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "acme"}, Meta: mcp.Meta{"idempotencyKey": key}})
		if err != nil {
			return "", err
		}
		if res.IsError {
			return "", fmt.Errorf("tool error %s", res.Content[0].(*mcp.TextContent).Text)
		}
		return res.Content[0].(*mcp.TextContent).Text, nil
	}
	invoices := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	first, err := call("create", "k1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := call("create", "k1")
	if err != nil || again != first || runs.Load() != 1 || invoices() != 1 {
		t.Fatalf("retry: %q, %v, after %q; %d runs, %d invoices; want a replay, 1 run, 1 invoice", again, err, first, runs.Load(), invoices())
	}

	for range 2 {
		if _, err := call("create_then_fail", "k2"); err == nil {
			t.Fatal("create_then_fail succeeded")
		}
	}
	if failures.Load() != 2 || invoices() != 1 {
		t.Fatalf("a call answering an error: %d runs for two calls, %d invoices; want 2 and 1 (rolled back, run again)", failures.Load(), invoices())
	}

	if got, err := call("elsewhere", "k3"); err != nil || got != "transaction false" {
		t.Fatalf("a tool outside InTransaction: %q, %v", got, err)
	}

	// A duplicate of a call whose transaction is open waits for it (in
	// PostgreSQL, on the key's row) and gets its response.
	type answer struct {
		text string
		err  error
	}
	first2, dup := make(chan answer, 1), make(chan answer, 1)
	go func() { text, err := call("gated", "k4"); first2 <- answer{text, err} }()
	<-entered
	go func() { text, err := call("gated", "k4"); dup <- answer{text, err} }()
	testdb.WaitLockWaiter(t, pool, "idem_keys") // the duplicate is waiting
	close(gate)
	a, b := <-first2, <-dup
	if a.err != nil || b.err != nil || a.text != b.text || runs.Load() != 2 || invoices() != 2 {
		t.Fatalf("original %q, %v; duplicate %q, %v; %d runs, %d invoices; want one run and the duplicate answered its response",
			a.text, a.err, b.text, b.err, runs.Load(), invoices())
	}
}
