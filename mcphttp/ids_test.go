package mcphttp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/idemkit/idem/mcphttp"
)

// Numeric ids that go-sdk cannot hold (fractions, beyond int64) are refused
// before the tool runs: go-sdk would answer them under another id, and the
// call would run unrecorded. Integral ids in any spelling work.
func TestUnsupportedIDsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)
	for _, id := range []string{`1.5`, `123456789012345678901234567890`, `-1e300`} {
		resp := h.post(t, session, callBody(json.RawMessage(id), "echo", map[string]any{"text": "id " + id}, nil), nil)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct {
			ID    json.RawMessage
			Error struct {
				Code int
				Data struct{ Reason string }
			}
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("id %s: %d %s: %v", id, resp.StatusCode, body, err)
		}
		if resp.StatusCode != http.StatusBadRequest || got.Error.Code != mcphttp.CodeInvalidRequest || got.Error.Data.Reason != mcphttp.ReasonUnsupportedID || !bytes.Equal(got.ID, []byte(id)) {
			t.Errorf("id %s: %d %s, want 400 with code %d reason %s and the id echoed", id, resp.StatusCode, body, mcphttp.CodeInvalidRequest, mcphttp.ReasonUnsupportedID)
		}
		if n := h.runs.get("echo:id " + id); n != 0 {
			t.Errorf("id %s: the tool ran %d times", id, n)
		}
	}
	// 2.0 is the integer 2: deduplicated like any id.
	for range 2 {
		msgs := readMessages(t, h.post(t, session, callBody(json.RawMessage(`2.0`), "echo", map[string]any{"text": "two"}, nil), nil))
		if len(msgs) != 1 || msgs[0].text() != "echo two #1" {
			t.Fatalf("id 2.0: %+v", msgs)
		}
	}
}
