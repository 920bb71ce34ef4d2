package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/mcphttp"
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
// the call's _meta.sessionId as X-Session-Id and its key as
// X-Idempotency-Key, as MCP servers generated from a REST API's description
// do, so that the API's own Idempotency-Key middleware dedupes the call too.
// The key is the one mcphttp hands the tool: the call's key
// (_meta.idempotencyKey, or the key mcphttp derived) bound to the caller, so
// that two callers who pick one key never share an invoice.
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
	progress(ctx, req, 0, "creating the invoice")
	// mcphttp.Transport sets X-Session-Id and X-Idempotency-Key from the
	// Meta in the context, and the caller's credentials for the demo's own
	// API.
	hreq, err := http.NewRequestWithContext(mcphttp.NewContext(ctx, meta), http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return nil, toolOutput{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(hreq)
	if err != nil {
		return nil, toolOutput{}, retryable(fmt.Sprintf("the invoice API could not be reached: %v", err))
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, toolOutput{}, retryable(fmt.Sprintf("reading the invoice API's answer: %v", err))
	}
	answer := fmt.Sprintf("the invoice API answered %s: %s", resp.Status, bytes.TrimSpace(respBody))
	switch code := resp.StatusCode; {
	case code == http.StatusCreated:
	case code >= 500, code == http.StatusConflict, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		// Transient: nothing was created (a 409 says the original is
		// still running). A JSON-RPC error, not a tool result, so that
		// mcphttp releases the call's key and a retry runs the tool again;
		// the API's own key dedupes that retry.
		return nil, toolOutput{}, retryable(answer)
	default:
		// A final answer (400 invalid invoice, 422 key reused for other
		// arguments): a tool error the model can read. mcphttp records it
		// like any tool result.
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: answer}}}, toolOutput{}, nil
	}
	var out toolOutput
	if err := json.Unmarshal(respBody, &out.Invoice); err != nil {
		return nil, toolOutput{}, fmt.Errorf("decoding the invoice API's answer: %w", err)
	}
	out.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	progress(ctx, req, 1, "invoice created")
	return nil, out, nil
}

// progress sends the caller a progress notification for the call, when it
// asked for them (a progressToken in _meta): the tool's answer then streams,
// one event before the invoice API is called and one after.
func progress(ctx context.Context, req *mcp.CallToolRequest, done float64, msg string) {
	if req.Session == nil || req.Params == nil {
		return
	}
	if tok := req.Params.GetProgressToken(); tok != nil {
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: done, Total: 1, Message: msg})
	}
}

// codeRetry is the JSON-RPC error code of a call that did not take effect
// and may be retried with the same _meta.idempotencyKey (a server error in
// the range JSON-RPC reserves for implementations).
const codeRetry = -32000

func retryable(msg string) error {
	return &jsonrpc.Error{Code: codeRetry, Message: msg + " (nothing was created; retry with the same idempotency key)"}
}

// newMCPServer returns the demo's MCP server: one tool, create_invoice,
// calling the invoice API at self.
func newMCPServer(self string) *mcp.Server {
	tool := &invoiceTool{
		url: self + "/invoices",
		// The caller's credentials go to the demo's own API and nowhere
		// else (not on a redirect either): it is the resource they were
		// issued for.
		client: &http.Client{Transport: &mcphttp.Transport{Upstreams: []string{self}}},
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "idemdemo", Title: "idem demo: invoices", Version: "1.0.0"}, nil)
	// The stateless handler's tools learn from mcphttp that their call was
	// cut off (lease lost, shutdown) through their own context, which keeps
	// the request that carries their answer.
	server.AddReceivingMiddleware(mcphttp.ToolCancellation)
	mcp.AddTool(server, &mcp.Tool{
		Name:  "create_invoice",
		Title: "Create an invoice",
		Description: "Creates an invoice through the invoice API. A repeated call with the same " +
			"_meta.idempotencyKey creates nothing new and returns the first call's result. " +
			"With a progressToken it reports progress before and after creating it.",
	}, tool.create)
	return server
}

// newMCPHandler serves the MCP Streamable HTTP transport at /mcp, with
// tools/call deduplicated by mcphttp on the demo's store: a call repeated
// with the same _meta.idempotencyKey (or, before protocol 2026-07-28 and
// without one, the same session and request id) replays the first call's
// result without running the tool. Clients at 2026-07-28 (go-sdk's picks it)
// reach a stateless handler, earlier ones a stateful one (sessions).
func newMCPHandler(a *app, self string) http.Handler {
	server := newMCPServer(self)
	getServer := func(*http.Request) *mcp.Server { return server }
	inner := mcphttp.ByVersion(
		mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Logger: a.logger}),
		// PropagateRequestCancellation: a 2026-07-28 call's tool runs on its
		// request's context, so that a call without a key is cancelled when
		// its client goes away; a keyed one still runs on (mcphttp detaches
		// it), and mcphttp cuts it off through ToolCancellation.
		mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Logger: a.logger, Stateless: true, PropagateRequestCancellation: true}),
	)
	return mcphttp.New(a.be.store, mcphttp.Options{
		Engine: engine.Options{
			Wait:     a.cfg.wait,
			Lease:    a.cfg.lease,
			Shutdown: a.cutOff,
			Owner:    a.owner,
			Logger:   a.logger,
		},
		Observer:       a.metrics.observeMCP,
		SessionCookies: a.cfg.sessionCookies,
		ScopeSecret:    scopeSecret(a.cfg),
	})(inner)
}
