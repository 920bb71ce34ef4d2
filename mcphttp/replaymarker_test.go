package mcphttp_test

import (
	"testing"

	"github.com/idemkit/idem/mcphttp"
)

// TestReplayMarkerInMeta: a replayed CallToolResult says so in its _meta,
// under mcphttp.ReplayedMetaKey, where an MCP client's application sees it
// (SDK clients hand the result's members to the application, not the HTTP
// headers, so Idempotent-Replayed alone is invisible there). A first run
// carries no marker, and the tool's own _meta survives the replay.
func TestReplayMarkerInMeta(t *testing.T) {
	t.Parallel()
	forEachVersion(t, func(t *testing.T, h *vharness) {
		cs := h.client(t, nil)
		first, err := cs.CallTool(t.Context(), keyed("charge", 7, "marker-1"))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := first.Meta[mcphttp.ReplayedMetaKey]; ok {
			t.Errorf("the first run carries the replay marker: %v", first.Meta)
		}
		again, err := cs.CallTool(t.Context(), keyed("charge", 7, "marker-1"))
		if err != nil {
			t.Fatal(err)
		}
		if resultText(t, again) != resultText(t, first) {
			t.Fatalf("the retry got %q, want the first result %q", resultText(t, again), resultText(t, first))
		}
		if again.Meta[mcphttp.ReplayedMetaKey] != true {
			t.Errorf("the replay's _meta is %v, want %s: true", again.Meta, mcphttp.ReplayedMetaKey)
		}
		for k, v := range first.Meta {
			if again.Meta[k] == nil {
				t.Errorf("the replay lost the result's own _meta %s: %v", k, v)
			}
		}
	})
}
