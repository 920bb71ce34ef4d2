package mcphttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// TestMaxExecutionEndsGoSDKTool: a stateful go-sdk tool that waits on its
// context, behind the wrapper with MaxExecution 200 ms and a 3 s lease. At
// the deadline the wrapper cancels the tool (notifications/cancelled), the
// tool returns its context's error, which is not recorded, and the retry
// with the same key runs the tool again at once, instead of being told the
// call is in flight for as long as the tool waits.
func TestMaxExecutionEndsGoSDKTool(t *testing.T) {
	t.Parallel()
	ended := make(chan time.Duration, 1)
	var calls atomic.Int64
	server := mcp.NewServer(&mcp.Implementation{Name: "deadline-test", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		if calls.Add(1) > 1 {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "second run"}}}, nil, nil
		}
		start := time.Now()
		select {
		case <-ctx.Done():
			ended <- time.Since(start)
			return nil, nil, ctx.Err()
		case <-time.After(10 * time.Second):
			ended <- -1
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "waited"}}}, nil, nil
		}
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	var events idemtest.Events
	srv := httptest.NewServer(mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{
		Engine: engine.Options{
			Lease:        3 * time.Second,
			MaxExecution: 200 * time.Millisecond,
			Wait:         -1,
		}, Observer: events.ObserveHTTP,
	})(inner))
	defer srv.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "wait", Meta: mcp.Meta{"idempotencyKey": "deadline"}}
	first, err := cs.CallTool(t.Context(), params)
	if err == nil && !first.IsError {
		t.Fatalf("the first call answered %+v, want a tool error: its tool was cut off", first.Content)
	}
	if after := <-ended; after < 0 || after > 2*time.Second {
		t.Fatalf("the tool's context ended after %v; want at about MaxExecution (200ms)", after)
	}
	// The release follows the tool's return: wait for it, then retry.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := events.Wait(ctx, idem.EventReleased, 1); err != nil {
		t.Fatalf("the cut-off call was not released: %v (events %v)", err, events.Kinds())
	}
	res, err := cs.CallTool(t.Context(), params)
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("the retry answered %+v (%v); want the tool run again", res, err)
	}
	if text, ok := res.Content[0].(*mcp.TextContent); !ok || text.Text != "second run" {
		t.Fatalf("the retry answered %+v, want the second run", res.Content[0])
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the tool ran %d times, want 2", n)
	}
}
