package mcphttp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/idemkit/idem/mcphttp"
)

// TestEnvelopeParsedAsTheServerDoes: go-sdk decodes a JSON-RPC message
// case-sensitively, so of "params" and "PARAMS" it runs "params". The
// wrapper once read the envelope with encoding/json, case-insensitive with
// the last member winning, and so keyed and fingerprinted a body on
// "PARAMS" while the tool ran "params": the result of echo "real" was
// recorded under the fingerprint of echo "decoy", and an honest echo "decoy"
// with the same key got "echo real", a result its tool never produced. Now
// the wrapper reads member names as the server does, and refuses a call
// whose envelope, params or _meta repeat a member (which the server would
// resolve one way and a reader another).
func TestEnvelopeParsedAsTheServerDoes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	session := h.initialize(t)
	const real = `{"name":"echo","arguments":{"text":"real"},"_meta":{"idempotencyKey":"K"}}`
	const decoy = `{"name":"echo","arguments":{"text":"decoy"},"_meta":{"idempotencyKey":"K"}}`

	crafted := readMessages(t, h.post(t, session, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":`+real+`,"PARAMS":`+decoy+`}`, nil))
	if len(crafted) != 1 || crafted[0].text() != "echo real #1" {
		t.Fatalf("crafted call: %+v, want the tool's answer to params (go-sdk ignores PARAMS)", crafted)
	}
	honest := readMessages(t, h.post(t, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":`+decoy+`}`, nil))
	if len(honest) != 1 {
		t.Fatalf("honest call: %+v", honest)
	}
	if got := honest[0]; got.text() == "echo real #1" {
		t.Fatalf("the honest echo decoy got %s: the result of a call it never made", got.raw)
	}

	for name, body := range map[string]string{
		"envelope": `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":` + real + `,"params":` + decoy + `}`,
		"params":   `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","name":"fail","arguments":{"text":"dup"},"_meta":{"idempotencyKey":"D1"}}}`,
		"_meta":    `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"dup"},"_meta":{"idempotencyKey":"D2","idempotencyKey":"D3"}}}`,
		"escaped":  `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":` + real + `,"par\u0061ms":` + decoy + `}`,
	} {
		resp := h.post(t, session, body, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct {
			Error struct {
				Code int
				Data struct{ Reason string }
			}
		}
		_ = json.Unmarshal(b, &got)
		if resp.StatusCode != http.StatusBadRequest || got.Error.Code != mcphttp.CodeInvalidRequest || got.Error.Data.Reason != mcphttp.ReasonDuplicateMember {
			t.Errorf("%s repeats a member: HTTP %d %s, want 400 with code %d reason %q", name, resp.StatusCode, b, mcphttp.CodeInvalidRequest, mcphttp.ReasonDuplicateMember)
		}
	}
	if n := h.runs.get("echo:dup"); n != 0 {
		t.Errorf("a call with a repeated member ran %d times", n)
	}
}
