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

// TestLeaseLostCancelsStatelessGoSDKTool: on a stateless go-sdk server
// (protocol 2026-07-28) each POST is its own session, so a
// notifications/cancelled lands in a fresh one and cancels nothing; and at
// 2026-07-28 a closed response stream, not the notification, is how a
// request is cancelled. There the wrapper ends the inner request's context
// instead (go-sdk ties the tool to it with PropagateRequestCancellation),
// and sends no notification: the tool's context ends within the lease when
// renewals hang. Before, the wrapper sent the notice, which went nowhere.
func TestLeaseLostCancelsStatelessGoSDKTool(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	ended := make(chan time.Duration, 1)
	server := mcp.NewServer(&mcp.Implementation{Name: "cancel-test", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		start := time.Now()
		select {
		case <-ctx.Done():
			ended <- time.Since(start)
		case <-time.After(4 * lease):
			ended <- -1
		}
		return &mcp.CallToolResult{}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})
	notices := make(chan string, 4)
	srv := httptest.NewServer(mcphttp.New(hangingRenew{memstore.New(memstore.Options{})}, mcphttp.Options{Lease: lease, Stateless: true})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if m := r.Header.Get("Mcp-Method"); m == "notifications/cancelled" {
				notices <- m
			}
			inner.ServeHTTP(w, r)
		})))
	defer srv.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan struct{})
	go func() {
		defer close(called)
		cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait", Meta: mcp.Meta{"idempotencyKey": "lease-lost-stateless"}})
	}()
	after := <-ended
	<-called
	cs.Close()
	if after < 0 || after > lease {
		t.Errorf("the tool's context ended after %v; want within the lease (%v)", after, lease)
	}
	select {
	case <-notices:
		t.Errorf("the wrapper sent a stateless server notifications/cancelled, which lands in a fresh session")
	default:
	}
}
