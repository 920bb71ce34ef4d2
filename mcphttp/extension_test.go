package mcphttp_test

import (
	"encoding/json"
	"testing"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/mcphttp"
)

// TestExtensionAdvertised: a client can discover that the server dedupes
// tools/call before it sends a key: at 2026-07-28 in
// capabilities.extensions of server/discover, before in
// capabilities.experimental of initialize, under mcphttp.ExtensionID, with
// the methods, the key sources, the retention the store reports and the
// replay marker's name. The inner server's own capabilities are untouched.
func TestExtensionAdvertised(t *testing.T) {
	t.Parallel()
	forEachVersion(t, func(t *testing.T, h *vharness) {
		caps := h.client(t, nil).InitializeResult().Capabilities
		where := caps.Experimental
		if h.v.protocol >= mcphttp.SessionlessProtocol {
			where = caps.Extensions
		}
		raw, err := json.Marshal(where[mcphttp.ExtensionID])
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Methods          []string `json:"methods"`
			KeySources       []string `json:"keySources"`
			RetentionSeconds int64    `json:"retentionSeconds"`
			ReplayedMeta     string   `json:"replayedMeta"`
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: %s: %v", mcphttp.ExtensionID, raw, err)
		}
		if len(got.Methods) != 1 || got.Methods[0] != "tools/call" || got.ReplayedMeta != mcphttp.ReplayedMetaKey ||
			got.RetentionSeconds != 24*60*60 || len(got.KeySources) < 3 {
			t.Errorf("%s advertised as %s", mcphttp.ExtensionID, raw)
		}
		if caps.Tools == nil {
			t.Errorf("the server's own capabilities were lost: %+v", caps)
		}
	})
}

// TestErrorTypesAndCodes: the wrapper's errors for a call in flight and for
// a key reused with other arguments carry data.type, a stable string to
// branch on (the names of the closed SEP-3182 proposal), besides
// data.reason; and its own codes are outside the JSON-RPC reserved range
// (-32768 to -32000), which MCP 2026-07-28 partitions for the protocol and
// forbids implementations to invent codes in.
func TestErrorTypesAndCodes(t *testing.T) {
	t.Parallel()
	for _, code := range []int{mcphttp.CodeKeyReused, mcphttp.CodeInFlight, mcphttp.CodeUnreplayable, mcphttp.CodeUnavailable} {
		if code >= -32768 && code <= -32000 {
			t.Errorf("code %d is in the JSON-RPC reserved range", code)
		}
	}
	h := newHarness(t, harnessOptions{wrap: mcphttp.Options{Engine: engine.Options{Wait: -1}}})
	s1, s2 := h.initialize(t), h.initialize(t)
	meta := map[string]any{"idempotencyKey": "typed"}
	done := make(chan []rpcMessage, 1)
	go func() {
		done <- readMessages(t, h.post(t, s1, callBody(1, "gate", map[string]any{"text": "t"}, meta), nil))
	}()
	<-h.entered
	inFlight := h.call(t, s2, 2, "gate", map[string]any{"text": "t"}, meta)
	close(h.gate)
	<-done
	reused := h.call(t, s2, 3, "gate", map[string]any{"text": "other"}, meta)
	for _, c := range []struct {
		got         rpcMessage
		code        int
		typ, reason string
	}{
		{inFlight, mcphttp.CodeInFlight, mcphttp.TypeInProgress, mcphttp.ReasonInFlight},
		{reused, mcphttp.CodeKeyReused, mcphttp.TypeConflict, mcphttp.ReasonKeyReused},
	} {
		if e := c.got.Error; e == nil || e.Code != c.code || e.Data.Type != c.typ || e.Data.Reason != c.reason {
			t.Errorf("got %s, want code %d, data.type %q, data.reason %q", c.got.raw, c.code, c.typ, c.reason)
		}
	}
}

// TestExtensionAdvertisedInJSON: the extension is added to an initialize
// answered as a JSON body as well, with its Content-Length right.
func TestExtensionAdvertisedInJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{jsonResponse: true})
	caps := h.client(t, nil, nil).InitializeResult().Capabilities
	if _, ok := caps.Experimental[mcphttp.ExtensionID]; !ok || caps.Tools == nil {
		t.Errorf("capabilities %+v, want the server's own and %s in experimental", caps, mcphttp.ExtensionID)
	}
}
