package mcphttp

import (
	"encoding/json"
	"net/http"
)

// cutOff reports whether a call run with Options.CancelWithClient was cut
// off by its client going away, so that nothing it answered is recorded:
// the client is gone, and what the tool answered on its way out (a JSON-RPC
// error, a tool error such as "context canceled" that go-sdk makes of the
// tool's error, or nothing) is an artefact of the cancellation, not the
// call's result. A successful result the tool finished with anyway is still
// recorded: the side effect happened, and the retry must get it.
func (m *wrapper) cutOff(r *http.Request, final []byte, isError bool) bool {
	if !m.cancelWithClient || r.Context().Err() == nil {
		return false
	}
	return final == nil || isError || isToolError(final)
}

// isToolError reports whether a JSON-RPC response is a tool result with
// isError set.
func isToolError(resp []byte) bool {
	var r struct {
		Result struct {
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	return json.Unmarshal(resp, &r) == nil && r.Result.IsError
}
