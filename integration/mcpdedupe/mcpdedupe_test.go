// Package mcpdedupe tests mcphttp end to end over PostgreSQL: what only a
// durable store can show.
package mcpdedupe

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/internal/pgcontainer"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgcontainer.Main(m))
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
	return startGated(t, schema, executions, nil, nil)
}

// startGated starts a process whose tool, when gate is not nil, signals
// entered and waits for gate to close before it creates the invoice.
func startGated(t *testing.T, schema string, executions *atomic.Int64, entered chan<- struct{}, gate <-chan struct{}, waiting ...chan struct{}) *process {
	t.Helper()
	pool := testdb.NewPool(t, testdb.Config(t, schema))
	if err := migrations.Up(t.Context(), pool, migrations.Options{}); err != nil {
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
		if gate != nil {
			entered <- struct{}{}
			<-gate
		}
		n := executions.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{
			Text: fmt.Sprintf("invoice %d for %s: %d", n, in.Customer, in.Cents),
		}}}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	var s idem.Store = store
	if len(waiting) > 0 {
		s = &signalStore{Store: store, waiting: waiting[0]}
	}
	p := &process{srv: httptest.NewServer(mcphttp.New(s, mcphttp.Options{})(inner)), store: store}
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
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
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
	first, err := cs.CallTool(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.Close() // only so no server goroutine outlives the test
	before.stop()

	after := start(t, schema, &executions)
	retry, err := connect(t, after.srv.URL).CallTool(t.Context(), params)
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
	if _, err := connect(t, after.srv.URL).CallTool(t.Context(), params); err != nil {
		t.Fatal(err)
	}
	if n := executions.Load(); n != 2 {
		t.Errorf("tool ran %d times, want 2", n)
	}
}

// signalStore reports a Wait, so the test knows a duplicate waits.
type signalStore struct {
	idem.Store
	waiting chan struct{}
}

func (s *signalStore) Wait(ctx context.Context, scope string, key idem.Key) error {
	select {
	case s.waiting <- struct{}{}:
	default:
	}
	return s.Store.Wait(ctx, scope, key)
}

// TestInFlightAcrossInstances: two instances share PostgreSQL. A duplicate
// arriving at the second while the first still runs the call waits for it
// (pgstore wakes it with LISTEN/NOTIFY) and gets its result.
func TestInFlightAcrossInstances(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	var executions atomic.Int64
	entered, gate := make(chan struct{}, 2), make(chan struct{})
	waiting := make(chan struct{}, 1)
	a := startGated(t, schema, &executions, entered, gate)
	b := startGated(t, schema, &executions, entered, gate, waiting)
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	params := &mcp.CallToolParams{
		Name:      "create_invoice",
		Arguments: map[string]any{"customer": "Initech", "amount_cents": 99},
		Meta:      mcp.Meta{"idempotencyKey": "turn-9-create_invoice"},
	}
	texts := make([]string, 2)
	var wg sync.WaitGroup
	for i, p := range []*process{a, b} {
		cs := connect(t, p.srv.URL)
		wg.Go(func() {
			res, err := cs.CallTool(context.Background(), params)
			if err != nil {
				t.Error(err)
				return
			}
			texts[i] = res.Content[0].(*mcp.TextContent).Text
		})
		if i == 0 {
			<-entered // instance a runs the call
		}
	}
	<-waiting // instance b's duplicate waits
	close(gate)
	wg.Wait()
	if texts[0] != "invoice 1 for Initech: 99" || texts[1] != texts[0] {
		t.Errorf("got %q, want both the one invoice", texts)
	}
	if n := executions.Load(); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}
}
