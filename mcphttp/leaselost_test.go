package mcphttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// hangingRenew is a store whose Renew blocks until its context ends.
type hangingRenew struct{ idem.Store }

func (hangingRenew) Renew(ctx context.Context, _ idem.Token, _ time.Duration) (time.Time, error) {
	<-ctx.Done()
	return time.Time{}, ctx.Err()
}

// TestLeaseLostCancelsGoSDKTool: go-sdk runs a stateful session's tools on
// the session's context, so cancelling the call's HTTP request does not
// reach them. When the lease is lost (renewals hang; lease 1 s), the wrapper
// sends the session notifications/cancelled for the call, and the tool's
// context ends within the lease. (It never did before: the tool ran on.)
func TestLeaseLostCancelsGoSDKTool(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	ended := make(chan time.Duration, 1)
	server := mcp.NewServer(&mcp.Implementation{Name: "cancel-test", Version: "1"}, nil)
	var start time.Time
	mcp.AddTool(server, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		start = time.Now()
		select {
		case <-ctx.Done():
			ended <- time.Since(start)
		case <-time.After(4 * lease):
			ended <- -1
		}
		return &mcp.CallToolResult{}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(mcphttp.New(hangingRenew{memstore.New(memstore.Options{})}, mcphttp.Options{Lease: lease})(inner))
	defer srv.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan struct{})
	go func() {
		defer close(called)
		cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait", Meta: mcp.Meta{"idempotencyKey": "lease-lost"}})
	}()
	after := <-ended
	cs.Close()
	<-called
	if after < 0 || after > lease {
		t.Fatalf("the tool's context ended after %v; want within the lease (%v)", after, lease)
	}
}
