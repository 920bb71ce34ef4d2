//lint:file-ignore SA1019 the suite exercises sampling, elicitation and logging, which go-sdk marks deprecated (SEP-2577).
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
