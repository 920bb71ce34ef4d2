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
