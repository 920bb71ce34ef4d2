package mcphttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/pgstore"
)

// payments is an upstream payment API protected by package middleware: each
// POST that runs is one payment, numbered.
type payments struct {
	mu   sync.Mutex
	made []string // the upstream key of each payment made, in order
}

func (p *payments) handler(store idem.Store) http.Handler {
	return middleware.New(store, middleware.Options{SessionCookies: []string{}})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.made = append(p.made, r.Header.Get(mcphttp.IdempotencyKeyHeader))
		n := len(p.made)
		p.mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"payment":%d,"request":%s}`, n, body)
	}))
}

// payServer is a go-sdk MCP server, behind mcphttp on store, whose "pay"
// tool calls the payment API at upstream over mcphttp.Transport with no
// Upstreams: the setup the docs recommend for a server on MCP's OAuth
// profile, where the server calls the API with its own token and the
// caller's identity never reaches the upstream.
func payServer(t *testing.T, store idem.Store, opts mcphttp.Options, upstream string) *httptest.Server {
	t.Helper()
	client := &http.Client{Transport: &mcphttp.Transport{}}
	server := mcp.NewServer(&mcp.Implementation{Name: "pay", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "pay"}, func(ctx context.Context, req *mcp.CallToolRequest, in chargeArgs) (*mcp.CallToolResult, any, error) {
		body, _ := json.Marshal(in)
		ureq, err := http.NewRequestWithContext(mcphttp.NewContext(ctx, mcphttp.FromCallToolRequest(req)), http.MethodPost, upstream, strings.NewReader(string(body)))
		if err != nil {
			return nil, nil, err
		}
		ureq.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(ureq)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(mcphttp.New(store, opts)(inner))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// withHeader is a transport that sets one header on every request.
type withHeader struct{ name, value string }

func (h withHeader) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(req)
}

// TestTwoCallersOneKeyUpstream: Alice and Bob, told apart by mcphttp (by
// bearer token, by session cookie, by principal), each call pay{amount:100}
// with _meta.idempotencyKey "pay-1". The tool forwards the call's key to a
// payment API protected by package middleware, with no Upstreams, so the API
// sees no caller identity. Each caller's payment must be made, and each
// caller must read their own; Alice's retry is a replay at both layers.
// Before the forwarded key was bound to the caller's scope, the Transport
// sent "pay-1" for both, and the API replayed Alice's payment to Bob: one
// payment, and Bob read Alice's.
func TestTwoCallersOneKeyUpstream(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) (mcpStore, apiStore idem.Store){
		"memstore": func(t *testing.T) (idem.Store, idem.Store) {
			return memstore.New(memstore.Options{}), memstore.New(memstore.Options{})
		},
		"pgstore": func(t *testing.T) (idem.Store, idem.Store) {
			open := func() idem.Store {
				pool, _ := testdb.Pool(t)
				return teststore.Migrated(t, pool, pgstore.Options{})
			}
			return open(), open()
		},
	}
	callers := map[string]struct {
		opts       mcphttp.Options
		alice, bob withHeader
	}{
		"bearer tokens": {mcphttp.Options{}, withHeader{"Authorization", "Bearer alice"}, withHeader{"Authorization", "Bearer bob"}},
		"session cookies": {mcphttp.Options{SessionCookies: []string{"sid"}},
			withHeader{"Cookie", "sid=alice"}, withHeader{"Cookie", "sid=bob"}},
		"principal": {mcphttp.Options{Principal: func(r *http.Request) string { return r.Header.Get("X-Test-User") }},
			withHeader{"X-Test-User", "alice"}, withHeader{"X-Test-User", "bob"}},
	}
	for storeName, open := range stores {
		for callerName, c := range callers {
			t.Run(storeName+"/"+callerName, func(t *testing.T) {
				t.Parallel()
				mcpStore, apiStore := open(t)
				var api payments
				upstream := httptest.NewServer(api.handler(apiStore))
				t.Cleanup(upstream.Close)
				srv := payServer(t, mcpStore, c.opts, upstream.URL)
				pay := func(who withHeader) string {
					t.Helper()
					client := mcp.NewClient(&mcp.Implementation{Name: who.value, Version: "1"}, nil)
					cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
						Endpoint: srv.URL, HTTPClient: &http.Client{Transport: who}, MaxRetries: -1, DisableStandaloneSSE: true,
					}, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer cs.Close()
					res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
						Name: "pay", Arguments: chargeArgs{Amount: 100}, Meta: mcp.Meta{"idempotencyKey": "pay-1"},
					})
					if err != nil {
						t.Fatal(err)
					}
					return resultText(t, res)
				}
				alice, bob, aliceAgain := pay(c.alice), pay(c.bob), pay(c.alice)
				if alice != aliceAgain {
					t.Errorf("Alice's retry got %s, want her first answer %s", aliceAgain, alice)
				}
				if alice == bob {
					t.Errorf("Bob got Alice's payment: both read %s", bob)
				}
				api.mu.Lock()
				defer api.mu.Unlock()
				if len(api.made) != 2 {
					t.Fatalf("the payment API made %d payments (upstream keys %q), want 2: one each", len(api.made), api.made)
				}
				if api.made[0] == "pay-1" || api.made[1] == "pay-1" {
					t.Errorf("the client's key reached the upstream as sent: %q", api.made)
				}
			})
		}
	}
}
