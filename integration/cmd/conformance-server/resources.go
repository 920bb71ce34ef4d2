package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The resources and prompts the suite reads. watchedURI is the resource
// whose subscribers are notified of an update.
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
