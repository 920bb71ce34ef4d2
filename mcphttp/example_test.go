package mcphttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// A go-sdk MCP server behind mcphttp: an agent that repeats a tools/call
// with the same _meta.idempotencyKey gets the first result, and
// the tool runs once. The key the tool would forward upstream is the
// client's key bound to the caller (a keyed hash, 64 hex characters), not
// the key as sent.
func Example() {
	server := mcp.NewServer(&mcp.Implementation{Name: "invoices", Version: "1"}, nil)
	created := 0
	mcp.AddTool(server, &mcp.Tool{Name: "create_invoice"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Customer string `json:"customer"`
	}) (*mcp.CallToolResult, any, error) {
		created++
		meta := mcphttp.FromCallToolRequest(req)
		text := fmt.Sprintf("invoice %d for %s (X-Idempotency-Key: %.8s…, %d characters)", created, in.Customer, meta.IdempotencyKey, len(meta.IdempotencyKey))
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{Principal: userOf})(inner))
	defer srv.Close()

	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, DisableStandaloneSSE: true}, nil)
	if err != nil {
		panic(err)
	}
	defer cs.Close()
	call := &mcp.CallToolParams{
		Name:      "create_invoice",
		Arguments: map[string]any{"customer": "ACME"},
		Meta:      mcp.Meta{"sessionId": "conversation-1", "idempotencyKey": "turn-3-create_invoice"},
	}
	for range 2 {
		res, err := cs.CallTool(context.Background(), call)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	}
	fmt.Println("invoices created:", created)
	// Output:
	// invoice 1 for ACME (X-Idempotency-Key: 60cf0562…, 64 characters)
	// invoice 1 for ACME (X-Idempotency-Key: 60cf0562…, 64 characters)
	// invoices created: 1
}

// A tool forwards the call's _meta to the upstream API it calls, as
// X-Session-Id and X-Idempotency-Key (the call's key bound to its caller),
// so the upstream's own idem middleware dedupes the tool's requests as
// well: a tool that sends its upstream request again (its first answer was
// lost) creates one invoice upstream.
func ExampleTransport() {
	// The upstream invoice API, protected by the idem middleware.
	invoices := 0
	api := httptest.NewServer(middleware.New(memstore.New(memstore.Options{}), middleware.Options{Principal: userOf})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			invoices++
			fmt.Fprintf(w, "invoice %d (session %s)", invoices, r.Header.Get("X-Session-Id"))
		})))
	defer api.Close()

	upstream := &http.Client{Transport: &mcphttp.Transport{}}
	server := mcp.NewServer(&mcp.Implementation{Name: "invoices", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "create_invoice"}, func(ctx context.Context, req *mcp.CallToolRequest, in map[string]any) (*mcp.CallToolResult, any, error) {
		ctx = mcphttp.NewContext(ctx, mcphttp.FromCallToolRequest(req))
		body, _ := json.Marshal(in)
		var text bytes.Buffer
		for range 2 { // the tool sends its request again
			post, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/invoices", bytes.NewReader(body))
			if err != nil {
				return nil, nil, err
			}
			resp, err := upstream.Do(post) // carries X-Session-Id and X-Idempotency-Key
			if err != nil {
				return nil, nil, err
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Fprintf(&text, "%s, replayed upstream: %q\n", out, resp.Header.Get("Idempotent-Replayed"))
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text.String()}}}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{Principal: userOf})(inner))
	defer srv.Close()

	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL, DisableStandaloneSSE: true}, nil)
	if err != nil {
		panic(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
		Name:      "create_invoice",
		Arguments: map[string]any{"customer": "ACME"},
		Meta:      mcp.Meta{"sessionId": "conversation-1", "idempotencyKey": "turn-3-create_invoice"},
	})
	if err != nil {
		panic(err)
	}
	fmt.Print(res.Content[0].(*mcp.TextContent).Text)
	fmt.Println("invoices created upstream:", invoices)
	// Output:
	// invoice 1 (session conversation-1), replayed upstream: ""
	// invoice 1 (session conversation-1), replayed upstream: "true"
	// invoices created upstream: 1
}

// On a stateless go-sdk server, ToolCancellation lets the wrapper tell a
// tool it was cut off without losing its answer. The server shuts down
// while the tool runs: the tool's context ends, and the tool, whose invoice
// exists already, answers anyway. The client gets that answer, the wrapper
// records it, and the retry at another instance is its replay.
func ExampleToolCancellation() {
	server := mcp.NewServer(&mcp.Implementation{Name: "invoices", Version: "1"}, nil)
	server.AddReceivingMiddleware(mcphttp.ToolCancellation)
	created, running := 0, make(chan struct{})
	mcp.AddTool(server, &mcp.Tool{Name: "create_invoice"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		created++ // the invoice exists from here on
		close(running)
		<-ctx.Done()
		text := fmt.Sprintf("invoice %d (the tool was told: %v)", created, context.Cause(ctx))
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true})
	store := memstore.New(memstore.Options{})
	shutdown, shutDown := context.WithCancel(context.Background())
	stopping := httptest.NewServer(mcphttp.New(store, mcphttp.Options{Principal: userOf, Engine: engine.Options{Shutdown: shutdown}})(inner))
	defer stopping.Close()
	other := httptest.NewServer(mcphttp.New(store, mcphttp.Options{Principal: userOf})(inner))
	defer other.Close()
	go func() {
		<-running
		shutDown()
	}()

	for _, url := range []string{stopping.URL, other.URL} {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true}, nil)
		if err != nil {
			panic(err)
		}
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
			Name: "create_invoice", Meta: mcp.Meta{"idempotencyKey": "turn-3-create_invoice"},
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s, replayed: %v\n", res.Content[0].(*mcp.TextContent).Text, res.Meta[mcphttp.ReplayedMetaKey] == true)
		cs.Close()
	}
	fmt.Println("invoices created:", created)
	// Output:
	// invoice 1 (the tool was told: engine: the server is shutting down), replayed: false
	// invoice 1 (the tool was told: engine: the server is shutting down), replayed: true
	// invoices created: 1
}

// userKey is the context key the server's authentication middleware, run
// before the wrapper, stores the user under.
type userKey struct{}

// userOf is the examples' Principal: the user that authentication found,
// so that a retry sent with a refreshed token finds its key.
func userOf(r *http.Request) string {
	user, _ := r.Context().Value(userKey{}).(string)
	return user
}
