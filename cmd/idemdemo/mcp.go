package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/idemkit/idem/mcphttp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolOutput is what create_invoice returns: the invoice, and whether the
// invoice API answered with a replay (the invoice existed already; no new
// one was created).
type toolOutput struct {
	Invoice
	Replayed bool `json:"replayed" jsonschema:"true when the invoice API replayed an earlier response: no new invoice was created"`
}

// invoiceTool is the create_invoice tool. Like a generated MCP server, it
// does nothing itself: it calls the invoice REST API over HTTP, forwarding
// the call's _meta.sessionId and _meta.idempotencyKey (or the key mcphttp
// derived for the call) as X-Session-Id and X-Idempotency-Key (seed 003).
// The API's own Idempotency-Key middleware then dedupes the call.
type invoiceTool struct {
	url    string // the invoice API's POST endpoint
	client *http.Client
}

func (t *invoiceTool) create(ctx context.Context, req *mcp.CallToolRequest, in invoiceRequest) (*mcp.CallToolResult, toolOutput, error) {
	meta := mcphttp.FromCallToolRequest(req)
	if meta.IdempotencyKey == "" {
		// mcphttp derives a key for every deduped call, so this means the
		// wrapper is not in front of the handler.
		return nil, toolOutput{}, errors.New("no idempotency key: set _meta.idempotencyKey")
	}
	body, err := json.Marshal(in)
	if err != nil {
		return nil, toolOutput{}, err
	}
	// mcphttp.Transport sets X-Session-Id and X-Idempotency-Key from the
	// Meta in the context.
	hreq, err := http.NewRequestWithContext(mcphttp.NewContext(ctx, meta), http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return nil, toolOutput{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(hreq)
	if err != nil {
		return nil, toolOutput{}, fmt.Errorf("calling the invoice API: %w", err)
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, toolOutput{}, fmt.Errorf("reading the invoice API's answer: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		// A tool error, not a protocol error: the model sees the API's
		// problem+json and can act on it (a 409 says retry later).
		return &mcp.CallToolResult{
			IsError: true,
			Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("the invoice API answered %s: %s", resp.Status, bytes.TrimSpace(respBody))}},
		}, toolOutput{}, nil
	}
	var out toolOutput
	if err := json.Unmarshal(respBody, &out.Invoice); err != nil {
		return nil, toolOutput{}, fmt.Errorf("decoding the invoice API's answer: %w", err)
	}
	out.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return nil, out, nil
}

// newMCPServer returns the demo's MCP server: one tool, create_invoice,
// calling the invoice API at self.
func newMCPServer(self string) *mcp.Server {
	tool := &invoiceTool{
		url:    self + "/invoices",
		client: &http.Client{Transport: &mcphttp.Transport{}},
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "idemdemo", Title: "idem demo: invoices", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{
		Name:  "create_invoice",
		Title: "Create an invoice",
		Description: "Creates an invoice through the invoice API. A repeated call with the same " +
			"_meta.idempotencyKey creates nothing new and returns the first call's result.",
	}, tool.create)
	return server
}

// newMCPHandler serves the MCP Streamable HTTP transport at /mcp.
func newMCPHandler(a *app, self string) http.Handler {
	server := newMCPServer(self)
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Logger: a.logger})
}
