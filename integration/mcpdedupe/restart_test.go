// Package mcpdedupe tests mcphttp end to end over PostgreSQL: what only a
// durable store can show.
package mcpdedupe

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// process is one run of an MCP server: its own pool, store, go-sdk handler
// and sessions. The side effect it counts lives outside, as a real one
// would.
type process struct {
	srv   *httptest.Server
	store *pgstore.Store
}

func start(t *testing.T, schema string, executions *atomic.Int64) *process {
	t.Helper()
	pool := testdb.NewPool(t, testdb.Config(t, schema))
	if err := migrations.Up(context.Background(), pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "restart", Version: "1"}, nil)
	type args struct {
		Customer string `json:"customer"`
		Cents    int    `json:"amount_cents"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "create_invoice"}, func(ctx context.Context, req *mcp.CallToolRequest, in args) (*mcp.CallToolResult, any, error) {
		n := executions.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{
			Text: fmt.Sprintf("invoice %d for %s: %d", n, in.Customer, in.Cents),
		}}}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	p := &process{srv: httptest.NewServer(mcphttp.New(store, mcphttp.Options{})(inner)), store: store}
	t.Cleanup(p.stop)
	return p
}

// stop ends the process: the listener, every connection and the store.
func (p *process) stop() {
	p.srv.CloseClientConnections()
	p.srv.Close()
	p.store.Close()
}

func connect(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestRestartReplaysMetaKey: the server restarts, so its MCP sessions are
// gone; the client initializes a new session and retries the call with the
// same _meta.idempotencyKey. PostgreSQL still holds the result: the retry
// is the replay, and the invoice was created once.
func TestRestartReplaysMetaKey(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	var executions atomic.Int64
	params := &mcp.CallToolParams{
		Name:      "create_invoice",
		Arguments: map[string]any{"customer": "ACME", "amount_cents": 1250},
		Meta:      mcp.Meta{"sessionId": "conversation-1", "idempotencyKey": "3f2a-turn-7-create_invoice"},
	}

	before := start(t, schema, &executions)
	cs := connect(t, before.srv.URL)
	first, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.Close() // only so no server goroutine outlives the test
	before.stop()

	after := start(t, schema, &executions)
	retry, err := connect(t, after.srv.URL).CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	a, b := first.Content[0].(*mcp.TextContent).Text, retry.Content[0].(*mcp.TextContent).Text
	if a != "invoice 1 for ACME: 1250" || b != a {
		t.Errorf("before restart %q, after %q: want the same invoice", a, b)
	}
	if n := executions.Load(); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}

	// A request-id key, by contrast, lives in the old Mcp-Session-Id: a new
	// session's call is a new call.
	params.Meta = nil
	if _, err := connect(t, after.srv.URL).CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	if n := executions.Load(); n != 2 {
		t.Errorf("tool ran %d times, want 2", n)
	}
}
