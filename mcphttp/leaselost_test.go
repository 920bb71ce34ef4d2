package mcphttp_test

import (
	"bytes"
	"context"
	"io"
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

// leaseLostLease is the lease of the lease-lost tests.
const leaseLostLease = time.Second

// TestLeaseLostCancelsGoSDKTool: go-sdk runs a stateful session's tools on
// the session's context, so cancelling the call's HTTP request does not
// reach them. When the lease is lost (renewals hang; lease 1 s), the wrapper
// sends the session notifications/cancelled for the call, and the tool's
// context ends within the lease. (It never did before: the tool ran on.)
func TestLeaseLostCancelsGoSDKTool(t *testing.T) {
	t.Parallel()
	after, notices := callUntilLeaseLost(t, &mcp.StreamableHTTPOptions{}, mcphttp.Options{})
	if after < 0 || after > leaseLostLease {
		t.Errorf("the tool's context ended after %v; want within the lease (%v)", after, leaseLostLease)
	}
	if notices == 0 {
		t.Errorf("the wrapper sent the stateful session no notifications/cancelled")
	}
}

// TestLeaseLostCancelsStatelessGoSDKTool: on a stateless go-sdk server
// (protocol 2026-07-28) each POST is its own session, so a
// notifications/cancelled lands in a fresh one and cancels nothing; and
// go-sdk ties the tool's context to the request's alone, and drops the
// answer of a request whose context ended. With mcphttp.ToolCancellation on
// the server, the wrapper ends the tool's context without ending the
// request: the tool's context ends within the lease when renewals hang, and
// no notification is sent.
func TestLeaseLostCancelsStatelessGoSDKTool(t *testing.T) {
	t.Parallel()
	after, notices := callUntilLeaseLost(t, &mcp.StreamableHTTPOptions{Stateless: true}, mcphttp.Options{Stateless: true}, mcphttp.ToolCancellation)
	if after < 0 || after > leaseLostLease {
		t.Errorf("the tool's context ended after %v; want within the lease (%v)", after, leaseLostLease)
	}
	if notices != 0 {
		t.Errorf("the wrapper sent a stateless server %d notifications/cancelled, which land in a fresh session", notices)
	}
}

// TestLeaseLostCancelsStatelessGoSDKToolLate: without ToolCancellation,
// the wrapper can cancel a stateless go-sdk tool only by ending its
// request (go-sdk's PropagateRequestCancellation ties the tool to it),
// which loses the answer of a tool that still gives one: so it does that
// only a lease after the cut-off, if the tool has not answered by then.
func TestLeaseLostCancelsStatelessGoSDKToolLate(t *testing.T) {
	t.Parallel()
	after, _ := callUntilLeaseLost(t, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true}, mcphttp.Options{Stateless: true})
	if after < leaseLostLease || after > 2*leaseLostLease {
		t.Errorf("the tool's context ended after %v; want a lease after it was lost (between %v and %v)", after, leaseLostLease, 2*leaseLostLease)
	}
}

// callUntilLeaseLost calls a tool that waits for its context to end (up to
// four leases), on go-sdk's handler with httpOpts and middleware behind the
// wrapper with wrap, whose renewals hang. It returns how long the tool's context took to
// end (-1: it did not), and how many notifications/cancelled reached the
// inner handler.
func callUntilLeaseLost(t *testing.T, httpOpts *mcp.StreamableHTTPOptions, wrap mcphttp.Options, middleware ...mcp.Middleware) (after time.Duration, notices int) {
	t.Helper()
	ended := make(chan time.Duration, 1)
	server := mcp.NewServer(&mcp.Implementation{Name: "cancel-test", Version: "1"}, nil)
	server.AddReceivingMiddleware(middleware...)
	mcp.AddTool(server, &mcp.Tool{Name: "wait"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		start := time.Now()
		select {
		case <-ctx.Done():
			ended <- time.Since(start)
		case <-time.After(4 * leaseLostLease):
			ended <- -1
		}
		return &mcp.CallToolResult{}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, httpOpts)
	noticed := make(chan struct{}, 8)
	wrap.Engine.Lease = leaseLostLease
	srv := httptest.NewServer(mcphttp.New(hangingRenew{memstore.New(memstore.Options{})}, wrap)(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"notifications/cancelled"`)) {
				noticed <- struct{}{}
			}
			inner.ServeHTTP(w, r)
		})))
	defer srv.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan struct{})
	go func() {
		defer close(called)
		cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait", Meta: mcp.Meta{"idempotencyKey": "lease-lost"}})
	}()
	after = <-ended
	cs.Close()
	<-called
	return after, len(noticed)
}
