//lint:file-ignore SA1019 the suite asks for sampling, roots and logging, which go-sdk marks deprecated (SEP-2577).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The multi round-trip tools (SEP-2322) the 2026-07-28 requirements of the
// suite call: each answers input_required until the client's retry carries
// what it asked for. They keep no state between rounds (the server is
// stateless): what a later round needs travels in requestState.

// tamperMark is what the suite appends to a requestState to tamper with it.
// Recognising it is enough for the suite; a real server protects its state
// with an HMAC or AEAD (SEP-2322, server requirements).
const tamperMark = "-TAMPERED"

func stateValid(s string) bool { return s != "" && !strings.HasSuffix(s, tamperMark) }

func objectSchema(props ...string) map[string]any {
	p := map[string]any{}
	for i := 0; i+1 < len(props); i += 2 {
		p[props[i]] = map[string]any{"type": props[i+1]}
	}
	required := []string{}
	for i := 0; i < len(props); i += 2 {
		required = append(required, props[i])
	}
	return map[string]any{"type": "object", "properties": p, "required": required}
}

func askName(message string) *mcp.ElicitParams {
	return &mcp.ElicitParams{Message: message, RequestedSchema: objectSchema("name", "string")}
}

func askConfirm() *mcp.ElicitParams {
	return &mcp.ElicitParams{Message: "Please confirm", RequestedSchema: objectSchema("ok", "boolean")}
}

func askLLM(prompt string, maxTokens int64) *mcp.CreateMessageParams {
	return &mcp.CreateMessageParams{
		Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: prompt}}},
		MaxTokens: maxTokens,
	}
}

// accepted is the content of an accepted elicitation answer to key, or nil.
func accepted(in mcp.InputResponseMap, key string) map[string]any {
	r, ok := in[key].(*mcp.ElicitResult)
	if !ok || r == nil || r.Action != "accept" {
		return nil
	}
	return r.Content
}

// sampled is the first text of a sampling answer to key.
func sampled(in mcp.InputResponseMap, key string) (string, bool) {
	r, ok := in[key].(*mcp.CreateMessageWithToolsResult)
	if !ok || r == nil {
		return "", false
	}
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text, true
		}
	}
	return "(no text)", true
}

func needs(state string, reqs mcp.InputRequestMap) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{InputRequests: reqs, RequestState: state}, nil, nil
}

func badState(msg string) (*mcp.CallToolResult, any, error) {
	return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}

func addInputRequiredTools(s *mcp.Server) {
	tool := func(name, desc string, h mcp.ToolHandlerFor[any, any]) {
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: desc}, h)
	}
	tool("test_input_required_result_elicitation", "Asks for the caller's name (elicitation)",
		func(_ context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			if name, _ := accepted(req.Params.InputResponses, "user_name")["name"].(string); name != "" {
				return result(text(fmt.Sprintf("Hello, %s!", name))), nil, nil
			}
			return needs("", mcp.InputRequestMap{"user_name": askName("What is your name?")})
		})
	tool("test_input_required_result_sampling", "Asks the client's LLM a question (sampling)",
		func(_ context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			if answer, ok := sampled(req.Params.InputResponses, "capital_question"); ok {
				return result(text("Sampling response: " + answer)), nil, nil
			}
			return needs("", mcp.InputRequestMap{"capital_question": askLLM("What is the capital of France?", 100)})
		})
	tool("test_input_required_result_list_roots", "Asks for the client's roots",
		func(_ context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			if r, ok := req.Params.InputResponses["client_roots"].(*mcp.ListRootsResult); ok && r != nil {
				uris := make([]string, 0, len(r.Roots))
				for _, root := range r.Roots {
					uris = append(uris, root.URI)
				}
				return result(text(fmt.Sprintf("Client exposed %d root(s): %s", len(r.Roots), strings.Join(uris, ", ")))), nil, nil
			}
			return needs("", mcp.InputRequestMap{"client_roots": &mcp.ListRootsParams{}})
		})
	tool("test_input_required_result_request_state", "Asks for a confirmation and round-trips a requestState",
		func(_ context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			if accepted(req.Params.InputResponses, "confirm") != nil {
				if !stateValid(req.Params.RequestState) {
					return badState("invalid requestState")
				}
				return result(text("state-ok: requestState received and confirmation accepted")), nil, nil
			}
			return needs("request_state", mcp.InputRequestMap{"confirm": askConfirm()})
		})
	tool("test_input_required_result_multiple_inputs", "Asks for a name, an LLM greeting and the roots in one round",
		func(_ context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			in := req.Params.InputResponses
			name, _ := accepted(in, "user_name")["name"].(string)
			greeting, greeted := sampled(in, "greeting")
			roots, rooted := in["client_roots"].(*mcp.ListRootsResult)
			if name != "" && greeted && rooted && roots != nil {
				return result(text(fmt.Sprintf("%s %s: %d root(s) visible", greeting, name, len(roots.Roots)))), nil, nil
			}
			return needs("multiple_inputs", mcp.InputRequestMap{
				"user_name":    askName("What is your name?"),
				"greeting":     askLLM("Generate a greeting", 50),
				"client_roots": &mcp.ListRootsParams{},
			})
		})
	tool("test_input_required_result_multi_round", "Two elicitation rounds, the state growing, then the answer",
		func(_ context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			state, in := req.Params.RequestState, req.Params.InputResponses
			switch {
			case state == "":
				return needs("round=1", mcp.InputRequestMap{"step1": askName("Step 1: What is your name?")})
			case state == "round=1":
				name, _ := accepted(in, "step1")["name"].(string)
				if name == "" {
					name = "unknown"
				}
				return needs("round=2;name="+name, mcp.InputRequestMap{"step2": &mcp.ElicitParams{
					Message: "Step 2: What is your favorite color?", RequestedSchema: objectSchema("color", "string"),
				}})
			}
			color, _ := accepted(in, "step2")["color"].(string)
			if color == "" {
				color = "unknown"
			}
			name := strings.TrimPrefix(state, "round=2;name=")
			return result(text(fmt.Sprintf("Multi-round complete: %s likes %s", name, color))), nil, nil
		})
	tool("test_input_required_result_tampered_state", "Refuses a retry whose requestState was tampered with",
		func(_ context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			if state := req.Params.RequestState; state != "" {
				if !stateValid(state) {
					return badState("invalid requestState: tampered")
				}
				if accepted(req.Params.InputResponses, "confirm") != nil {
					return result(text("state-ok: requestState received and confirmation accepted")), nil, nil
				}
			}
			return needs("tampered_state", mcp.InputRequestMap{"confirm": askConfirm()})
		})
	tool("test_input_required_result_capabilities", "Asks only for the inputs the client's capabilities cover",
		func(_ context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			if len(req.Params.InputResponses) > 0 {
				return result(text("Capability-aware input requests fulfilled")), nil, nil
			}
			caps := req.ClientCapabilities()
			reqs := mcp.InputRequestMap{}
			if caps != nil && caps.Elicitation != nil {
				reqs["user_name"] = askName("What is your name?")
			}
			if caps != nil && caps.Sampling != nil {
				reqs["greeting"] = askLLM("Generate a short greeting", 50)
			}
			if caps != nil && (caps.RootsV2 != nil || caps.Roots.ListChanged) {
				reqs["client_roots"] = &mcp.ListRootsParams{}
			}
			if len(reqs) == 0 {
				return result(text("No declared client capability supports an in-band input request")), nil, nil
			}
			return needs("", reqs)
		})
	// The diagnostic tools of the suite's server-stateless scenario.
	tool("test_missing_capability", "Needs the client's sampling capability; without it, MissingRequiredClientCapability (-32021)",
		func(_ context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			if caps := req.ClientCapabilities(); caps != nil && caps.Sampling != nil {
				return result(text("Client declared the sampling capability; tool executed.")), nil, nil
			}
			data, err := json.Marshal(mcp.MissingRequiredClientCapabilityData{
				RequiredCapabilities: &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}},
			})
			if err != nil {
				return nil, nil, err
			}
			return nil, nil, &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities, Message: "the sampling capability is required and was not declared", Data: data}
		})
	tool("test_streaming_elicitation", "Answers on its response stream with its result only, never a request of its own",
		func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
			return result(text("result only: no request on the response stream")), nil, nil
		})
	tool("test_logging_tool", "Logs a message; go-sdk drops it unless the request set _meta logLevel",
		func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
			_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "test_logging_tool ran"})
			return result(text("Logged, if the request asked for logs.")), nil, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "test_input_required_result_prompt", Description: "Asks for context, then returns a prompt with it"},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			if c := accepted(req.Params.InputResponses, "user_context"); c != nil {
				ctxText, _ := c["context"].(string)
				return &mcp.GetPromptResult{
					Description: "A prompt with elicited context",
					Messages:    []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Context: " + ctxText}}},
				}, nil
			}
			return &mcp.GetPromptResult{InputRequests: mcp.InputRequestMap{"user_context": &mcp.ElicitParams{
				Message: "Please provide context for the prompt", RequestedSchema: objectSchema("context", "string"),
			}}}, nil
		})
}
