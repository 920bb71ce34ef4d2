// Command conformance-server serves what the official MCP conformance suite
// (@modelcontextprotocol/conformance, "server" mode) expects: its tools,
// resources, prompts, completion, logging and subscriptions, on go-sdk's
// Streamable HTTP handler in its default (stateful, SSE) mode, wrapped by
// mcphttp. The suite passing against it shows the wrapper changes nothing
// a conforming client can observe, including the tools/call it dedupes.
// With -stateless it serves go-sdk's stateless handler (protocol
// 2026-07-28), with the multi round-trip tools the 2026-07-28 requirements
// call; -derive-keys (test only) gives the suite's calls keys, so they take
// the dedupe path; scripts/conformance.sh runs both modes, bare
// (-idem=false) and wrapped, and compares.
//
//	conformance-server -addr 127.0.0.1:8080   # serves http://127.0.0.1:8080/mcp
//
// With DATABASE_URL (or -database-url) the wrapper's store is PostgreSQL,
// migrated at start; without it, the in-memory store, said at start.
//
//lint:file-ignore SA1019 the suite exercises sampling, elicitation and logging, which go-sdk marks deprecated (SEP-2577).
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address; the MCP endpoint is /mcp")
	dbURL := flag.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL); empty means the in-memory store")
	wrap := flag.Bool("idem", true, "wrap go-sdk's handler in mcphttp; -idem=false serves it bare, for comparison")
	stateless := flag.Bool("stateless", false, "serve go-sdk's stateless handler (protocol 2026-07-28, no sessions) instead of the stateful one")
	deriveKeys := flag.Bool("derive-keys", false, "test only: give every tools/call without a key one derived from its tool, arguments and _meta, so the suite's calls take the dedupe path")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, config{addr: *addr, dbURL: *dbURL, wrap: *wrap, stateless: *stateless, deriveKeys: *deriveKeys}, log); err != nil {
		log.Error("conformance-server", "err", err)
		os.Exit(1)
	}
}

type config struct {
	addr, dbURL                 string
	wrap, stateless, deriveKeys bool
}

func run(ctx context.Context, cfg config, log *slog.Logger) error {
	var handler http.Handler
	addr, dbURL, wrap := cfg.addr, cfg.dbURL, cfg.wrap

	server := newServer()
	watchCtx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	go notifyWatched(watchCtx, server)

	// PropagateRequestCancellation as mcphttp recommends for a stateless
	// handler (it applies from 2026-07-28 only), bare and wrapped alike;
	// ToolCancellation only with the wrapper, which it serves.
	handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: cfg.stateless, PropagateRequestCancellation: true})
	if wrap {
		store, closeStore, err := openStore(ctx, dbURL, log)
		if err != nil {
			return err
		}
		defer closeStore()
		events := &eventCounts{}
		defer events.report(log)
		server.AddReceivingMiddleware(mcphttp.ToolCancellation)
		handler = mcphttp.New(store, mcphttp.Options{Logger: log, Observer: events.observe, Stateless: cfg.stateless})(handler)
		if cfg.deriveKeys {
			handler = deriveKeys(handler)
		}
	} else {
		log.Warn("serving go-sdk's handler without mcphttp")
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", handler)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving MCP", "url", "http://"+ln.Addr().String()+"/mcp")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func openStore(ctx context.Context, dbURL string, log *slog.Logger) (idem.Store, func(), error) {
	if dbURL == "" {
		log.Warn("no DATABASE_URL: using the in-memory store (nothing survives a restart)")
		return memstore.New(memstore.Options{}), func() {}, nil
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("migrating: %w", err)
	}
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	log.Info("using the PostgreSQL store")
	return store, func() { store.Close(); pool.Close() }, nil
}

// newServer registers everything the suite asks for.
func newServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "idem-conformance-server", Version: "1.0.0"}, &mcp.ServerOptions{
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}, nil
		},
		// go-sdk tracks subscriptions itself; the handlers only accept them.
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	addTools(s)
	addInputRequiredTools(s)
	addResources(s)
	addPrompts(s)
	return s
}

// The suite's fixtures: a 1x1 PNG and a silent WAV.
var (
	pngData = mustBase64("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
	wavData = mustBase64("UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=")
)

func mustBase64(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func result(content ...mcp.Content) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: content}
}

func text(s string) *mcp.TextContent { return &mcp.TextContent{Text: s} }

// fixed is a tool whose answer does not depend on its input.
func fixed(res *mcp.CallToolResult) mcp.ToolHandlerFor[any, any] {
	return func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
		return res, nil, nil
	}
}

func addTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "test_simple_text", Description: "Returns simple text content"},
		fixed(result(text("This is a simple text response for testing."))))
	mcp.AddTool(s, &mcp.Tool{Name: "test_image_content", Description: "Returns image content"},
		fixed(result(&mcp.ImageContent{Data: pngData, MIMEType: "image/png"})))
	mcp.AddTool(s, &mcp.Tool{Name: "test_audio_content", Description: "Returns audio content"},
		fixed(result(&mcp.AudioContent{Data: wavData, MIMEType: "audio/wav"})))
	mcp.AddTool(s, &mcp.Tool{Name: "test_embedded_resource", Description: "Returns an embedded resource"},
		fixed(result(&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
			URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource",
		}})))
	mcp.AddTool(s, &mcp.Tool{Name: "test_multiple_content_types", Description: "Returns text, image and resource content"},
		fixed(result(
			text("This is text content"),
			&mcp.ImageContent{Data: pngData, MIMEType: "image/png"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI: "test://embedded-in-multiple", MIMEType: "text/plain", Text: "This is an embedded resource",
			}},
		)))
	mcp.AddTool(s, &mcp.Tool{Name: "test_tool_with_logging", Description: "Sends log messages while it runs"}, toolWithLogging)
	mcp.AddTool(s, &mcp.Tool{Name: "test_tool_with_progress", Description: "Reports progress while it runs"}, toolWithProgress)
	mcp.AddTool(s, &mcp.Tool{Name: "test_error_handling", Description: "Always fails"},
		func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("this tool intentionally returns an error for testing")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "test_sampling", Description: "Asks the client's LLM for a completion"}, toolSampling)
	mcp.AddTool(s, &mcp.Tool{Name: "test_elicitation", Description: "Asks the user for input"}, toolElicitation)
	mcp.AddTool(s, &mcp.Tool{Name: "test_elicitation_sep1034_defaults", Description: "Elicitation with default values (SEP-1034)"},
		elicit("Test defaults for primitives", map[string]any{
			"type": "object",
			"properties": map[string]any{
				"name":     map[string]any{"type": "string", "description": "User name", "default": "John Doe"},
				"age":      map[string]any{"type": "integer", "description": "User age", "default": 30},
				"score":    map[string]any{"type": "number", "description": "User score", "default": 95.5},
				"status":   map[string]any{"type": "string", "description": "User status", "enum": []string{"active", "inactive", "pending"}, "default": "active"},
				"verified": map[string]any{"type": "boolean", "description": "Verification status", "default": true},
			},
		}))
	options := []map[string]any{
		{"const": "value1", "title": "First Option"},
		{"const": "value2", "title": "Second Option"},
		{"const": "value3", "title": "Third Option"},
	}
	mcp.AddTool(s, &mcp.Tool{Name: "test_elicitation_sep1330_enums", Description: "Elicitation with enum schemas (SEP-1330)"},
		elicit("Test enum schemas", map[string]any{
			"type": "object",
			"properties": map[string]any{
				"untitledSingle": map[string]any{"type": "string", "enum": []string{"option1", "option2", "option3"}},
				"titledSingle":   map[string]any{"type": "string", "oneOf": options},
				"legacyEnum": map[string]any{"type": "string", "enum": []string{"opt1", "opt2", "opt3"},
					"enumNames": []string{"Option One", "Option Two", "Option Three"}},
				"untitledMulti": map[string]any{"type": "array", "minItems": 1, "maxItems": 3,
					"items": map[string]any{"type": "string", "enum": []string{"option1", "option2", "option3"}}},
				"titledMulti": map[string]any{"type": "array", "minItems": 1, "maxItems": 3,
					"items": map[string]any{"type": "string", "anyOf": options}},
			},
		}))
	mcp.AddTool(s, &mcp.Tool{
		Name:        "json_schema_2020_12_tool",
		Description: "Has an input schema using JSON Schema 2020-12 features (SEP-1613)",
		InputSchema: jsonSchema202012,
	}, func(_ context.Context, _ *mcp.CallToolRequest, in map[string]any) (*mcp.CallToolResult, any, error) {
		return result(text(fmt.Sprintf("JSON Schema 2020-12 tool called with: %v", in))), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "test_reconnection", Description: "Closes the SSE stream mid-call (SEP-1699)"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			if req.Extra != nil && req.Extra.CloseSSEStream != nil {
				req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: 10 * time.Millisecond})
			}
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return nil, nil, err
			}
			return result(text("Reconnection test completed successfully.")), nil, nil
		})
}

var jsonSchema202012 = json.RawMessage(`{
	"$schema": "https://json-schema.org/draft/2020-12/schema",
	"type": "object",
	"$defs": {
		"address": {
			"$anchor": "addressDef",
			"type": "object",
			"properties": {"street": {"type": "string"}, "city": {"type": "string"}}
		}
	},
	"properties": {
		"name": {"type": "string"},
		"address": {"$ref": "#/$defs/address"},
		"contactMethod": {"type": "string", "enum": ["phone", "email"]},
		"phone": {"type": "string"},
		"email": {"type": "string"}
	},
	"allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
	"if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
	"then": {"required": ["phone"]},
	"else": {"required": ["email"]},
	"additionalProperties": false
}`)

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func toolWithLogging(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
	for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
		if i > 0 {
			if err := sleep(ctx, 50*time.Millisecond); err != nil {
				return nil, nil, err
			}
		}
		if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: msg}); err != nil {
			return nil, nil, err
		}
	}
	return result(text("Tool with logging executed successfully")), nil, nil
}

func toolWithProgress(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
	token := req.Params.GetProgressToken()
	for _, p := range []float64{0, 50, 100} {
		if token != nil {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: p, Total: 100,
				Message: fmt.Sprintf("Completed step %.0f of 100", p),
			}); err != nil {
				return nil, nil, err
			}
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, nil, err
		}
	}
	return result(text(fmt.Sprint(token))), nil, nil
}

type samplingArgs struct {
	Prompt string `json:"prompt" jsonschema:"the prompt to send to the LLM"`
}

func toolSampling(ctx context.Context, req *mcp.CallToolRequest, in samplingArgs) (*mcp.CallToolResult, any, error) {
	res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
		Messages:  []*mcp.SamplingMessage{{Role: "user", Content: text(in.Prompt)}},
		MaxTokens: 100,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("sampling failed: %w", err)
	}
	answer := "(non-text response)"
	if tc, ok := res.Content.(*mcp.TextContent); ok {
		answer = tc.Text
	}
	return result(text("LLM response: " + answer)), nil, nil
}

type elicitationArgs struct {
	Message string `json:"message" jsonschema:"the message to show the user"`
}

func toolElicitation(ctx context.Context, req *mcp.CallToolRequest, in elicitationArgs) (*mcp.CallToolResult, any, error) {
	return elicit(in.Message, map[string]any{
		"type":       "object",
		"properties": map[string]any{"username": map[string]any{"type": "string", "description": "Your preferred username"}},
		"required":   []string{"username"},
	})(ctx, req, nil)
}

// elicit is a tool that asks the user for input of the given schema and
// reports what came back.
func elicit(message string, schema map[string]any) mcp.ToolHandlerFor[any, any] {
	return func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: message, RequestedSchema: schema})
		if err != nil {
			return nil, nil, fmt.Errorf("elicitation failed: %w", err)
		}
		return result(text(fmt.Sprintf("Elicitation result: action=%s, content=%v", res.Action, res.Content))), nil, nil
	}
}

const watchedURI = "test://watched-resource"

func addResources(s *mcp.Server) {
	contents := func(c *mcp.ResourceContents) mcp.ResourceHandler {
		return func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			out := *c
			out.URI = req.Params.URI
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{&out}}, nil
		}
	}
	s.AddResource(&mcp.Resource{Name: "static-text", Description: "A static text resource", MIMEType: "text/plain", URI: "test://static-text"},
		contents(&mcp.ResourceContents{MIMEType: "text/plain", Text: "This is the content of the static text resource."}))
	s.AddResource(&mcp.Resource{Name: "static-binary", Description: "A static binary resource (an image)", MIMEType: "image/png", URI: "test://static-binary"},
		contents(&mcp.ResourceContents{MIMEType: "image/png", Blob: pngData}))
	s.AddResource(&mcp.Resource{Name: "watched-resource", Description: "A resource updated every 3 seconds", MIMEType: "text/plain", URI: watchedURI},
		contents(&mcp.ResourceContents{MIMEType: "text/plain", Text: "Watched resource content"}))
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "template", Description: "A resource template with parameter substitution",
		MIMEType: "application/json", URITemplate: "test://template/{id}/data",
	}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		id := strings.TrimSuffix(strings.TrimPrefix(req.Params.URI, "test://template/"), "/data")
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
			URI: req.Params.URI, MIMEType: "application/json",
			Text: fmt.Sprintf(`{"id": %q, "templateTest": true, "data": "Data for ID: %s"}`, id, id),
		}}}, nil
	})
}

// notifyWatched announces an update of the watched resource every 3
// seconds, for the subscription scenarios.
func notifyWatched(ctx context.Context, s *mcp.Server) {
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: watchedURI})
		}
	}
}

func addPrompts(s *mcp.Server) {
	prompt := func(description string, messages func(args map[string]string) []*mcp.PromptMessage) mcp.PromptHandler {
		return func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Description: description, Messages: messages(req.Params.Arguments)}, nil
		}
	}
	user := func(c mcp.Content) *mcp.PromptMessage { return &mcp.PromptMessage{Role: "user", Content: c} }

	s.AddPrompt(&mcp.Prompt{Name: "test_simple_prompt", Title: "Simple Test Prompt", Description: "A simple prompt without arguments"},
		prompt("A simple test prompt", func(map[string]string) []*mcp.PromptMessage {
			return []*mcp.PromptMessage{user(text("This is a simple prompt for testing."))}
		}))
	s.AddPrompt(&mcp.Prompt{
		Name: "test_prompt_with_arguments", Title: "Prompt With Arguments", Description: "A prompt with required arguments",
		Arguments: []*mcp.PromptArgument{
			{Name: "arg1", Description: "First test argument", Required: true},
			{Name: "arg2", Description: "Second test argument", Required: true},
		},
	}, prompt("A prompt with arguments", func(args map[string]string) []*mcp.PromptMessage {
		return []*mcp.PromptMessage{user(text(fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", args["arg1"], args["arg2"])))}
	}))
	s.AddPrompt(&mcp.Prompt{
		Name: "test_prompt_with_embedded_resource", Title: "Prompt With Embedded Resource", Description: "A prompt that includes an embedded resource",
		Arguments: []*mcp.PromptArgument{{Name: "resourceUri", Description: "URI of the resource to embed", Required: true}},
	}, prompt("A prompt with an embedded resource", func(args map[string]string) []*mcp.PromptMessage {
		return []*mcp.PromptMessage{
			user(&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: args["resourceUri"], MIMEType: "text/plain", Text: "Embedded resource content for testing."}}),
			user(text("Please process the embedded resource above.")),
		}
	}))
	s.AddPrompt(&mcp.Prompt{Name: "test_prompt_with_image", Title: "Prompt With Image", Description: "A prompt that includes image content"},
		prompt("A prompt with an image", func(map[string]string) []*mcp.PromptMessage {
			return []*mcp.PromptMessage{
				user(&mcp.ImageContent{Data: pngData, MIMEType: "image/png"}),
				user(text("Please analyze the image above.")),
			}
		}))
}
