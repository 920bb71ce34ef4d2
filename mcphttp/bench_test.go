package mcphttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// BenchmarkToolsCall measures one tools/call over HTTP to a go-sdk server:
// bare, behind mcphttp on memstore as a first execution (claim, stream,
// record), and as a replay (claim, probe, answer).
func BenchmarkToolsCall(b *testing.B) {
	server := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	for _, mode := range []string{"bare", "first", "replay"} {
		b.Run(mode, func(b *testing.B) {
			var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
			if mode != "bare" {
				h = mcphttp.New(memstore.New(memstore.Options{Capacity: -1}), mcphttp.Options{})(h)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			post := func(session, body string) *http.Response {
				req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				if session != "" {
					req.Header.Set("Mcp-Session-Id", session)
					req.Header.Set("Mcp-Protocol-Version", protocolVersion)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				return resp
			}
			resp := post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+protocolVersion+`","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`)
			session := resp.Header.Get("Mcp-Session-Id")
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			resp = post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			resp.Body.Close()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				id := i + 1
				if mode == "replay" {
					id = 1
				}
				resp := post(session, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}`, id))
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !strings.Contains(string(body), `"hello"`) {
					b.Fatalf("got %s", body)
				}
			}
			b.StopTimer()
			del, _ := http.NewRequest(http.MethodDelete, srv.URL, nil)
			del.Header.Set("Mcp-Session-Id", session)
			if resp, err := http.DefaultClient.Do(del); err == nil {
				resp.Body.Close()
			}
		})
	}
}

// BenchmarkToolsCallModern is BenchmarkToolsCall at protocol 2026-07-28,
// on go-sdk's stateless handler: bare; behind mcphttp as a first execution
// (a new _meta.idempotencyKey per call) and as a replay (one key, a new id
// per call, answered after a server/discover probe); and a tools/list,
// which mcphttp routes by its Mcp-Method header without reading the body.
func BenchmarkToolsCallModern(b *testing.B) {
	server := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	for _, mode := range []string{"bare", "first", "replay", "list-bare", "list"} {
		b.Run(mode, func(b *testing.B) {
			var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
				&mcp.StreamableHTTPOptions{Stateless: true})
			if mode != "bare" && mode != "list-bare" {
				h = mcphttp.New(memstore.New(memstore.Options{Capacity: -1}), mcphttp.Options{Stateless: true})(h)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			method, name, want := "tools/call", "echo", `"hello"`
			if strings.HasPrefix(mode, "list") {
				method, name, want = "tools/list", "", `"echo"`
			}
			for i := 0; b.Loop(); i++ {
				key := "k"
				if mode == "first" {
					key = fmt.Sprint("k", i)
				}
				body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"idempotencyKey":%q,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, i+1, method, key)
				if method == "tools/list" {
					body = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, i+1)
				}
				req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
				req.Header.Set("Mcp-Method", method)
				if name != "" {
					req.Header.Set("Mcp-Name", name)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !strings.Contains(string(got), want) {
					b.Fatalf("got %s", got)
				}
			}
		})
	}
}
