package mcphttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sjson "github.com/segmentio/encoding/json"

	"github.com/idemkit/idem/agentkey"
	"github.com/idemkit/idem/memstore"
)

// goSDKParams is what go-sdk's server reads of a tools/call's params, with
// the decoder go-sdk uses (segmentio's, matching names case-sensitively).
type goSDKParams struct {
	Meta           map[string]any  `json:"_meta"`
	Name           string          `json:"name"`
	Arguments      json.RawMessage `json:"arguments"`
	RequestState   json.RawMessage `json:"requestState"`
	InputResponses json.RawMessage `json:"inputResponses"`
}

func decodeGoSDKParams(raw json.RawMessage) (goSDKParams, error) {
	var p goSDKParams
	dec := sjson.NewDecoder(bytes.NewReader(raw))
	dec.DontMatchCaseInsensitiveStructFields()
	err := dec.Decode(&p)
	return p, err
}

// FuzzParseCallAgreesWithGoSDK: whatever body the wrapper reads as a call
// it would run and record, go-sdk reads as the same call: the same method,
// the same id (or one it answers under exactly), the same tool, key,
// session, arguments and round. A disagreement is a result recorded under
// what the call did not ask for (the case-insensitive envelope that
// keyed "PARAMS" while go-sdk ran "params"), or a response the wrapper
// cannot recognise (an id go-sdk rounds).
func FuzzParseCallAgreesWithGoSDK(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"},"_meta":{"idempotencyKey":"k","sessionId":"s"}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"e"},"PARAMS":{"name":"f"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e"},"params":{"name":"f"}}`,
		`{"jsonrpc":"2.0","id":1,"Method":"tools/call","method":"tools/call","params":{"Name":"x","name":"e"}}`,
		`{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"e"}}`,
		`{"jsonrpc":"2.0","id":1e2,"method":"tools/call","params":{"name":"e","_meta":{"idempotencyKey":"a","IdempotencyKey":"b"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"e","idempotencyKey":"k","requestState":"s","inputResponses":{"a":{}}}}`,
		`{"jsonrpc":"2.0","id":"\u0000","method":"tools/c\u0061ll","par\u0061ms":{"name":"\u2028"}}`,
		`{"jsonrpc":"2.0","id":-0,"method":"tools/call","params":{"name":"e","_meta":{"idempotencyKey":"k","idempotencyKey":"j"}}}`,
	} {
		f.Add([]byte(seed))
	}
	methods := map[string]bool{"tools/call": true}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, ok := parseCall(body, methods)
		if !ok || c.refusal != "" {
			return // passed through to the server, or refused: never recorded
		}
		msg, err := jsonrpc.DecodeMessage(body)
		if err != nil {
			return // the server refuses it: no result to record
		}
		req, isReq := msg.(*jsonrpc.Request)
		if !isReq {
			t.Fatalf("the wrapper read a call, go-sdk a %T", msg)
		}
		if req.Method != c.method {
			t.Fatalf("method: wrapper %q, go-sdk %q", c.method, req.Method)
		}
		switch v := req.ID.Raw().(type) {
		case string:
			if !c.id.IsString() || c.id.String() != v {
				t.Fatalf("id: wrapper %v, go-sdk string %q", c.id, v)
			}
		case int64:
			if c.id.IsString() || c.id.String() != fmt.Sprint(v) {
				t.Fatalf("id: wrapper %v, go-sdk answers under %d", c.id, v)
			}
		default:
			t.Fatalf("id: wrapper %v, go-sdk %T", c.id, v)
		}
		p, err := decodeGoSDKParams(req.Params)
		if err != nil {
			return // go-sdk refuses the params: the tool does not run
		}
		if p.Name != c.name {
			t.Fatalf("tool: wrapper %q, go-sdk %q", c.name, p.Name)
		}
		key, hasKey := p.Meta["idempotencyKey"]
		if hasKey != c.hasKey {
			t.Fatalf("_meta.idempotencyKey present: wrapper %v, go-sdk %v", c.hasKey, hasKey)
		}
		if s, isString := key.(string); isString && s != c.idemKey {
			t.Fatalf("_meta.idempotencyKey: wrapper %q, go-sdk %q", c.idemKey, s)
		}
		if s, _ := p.Meta["sessionId"].(string); s != c.sessionID {
			t.Fatalf("_meta.sessionId: wrapper %q, go-sdk %q", c.sessionID, s)
		}
		if !sameJSON(p.Arguments, c.arguments) {
			t.Fatalf("arguments: wrapper %s, go-sdk %s", c.arguments, p.Arguments)
		}
		if (c.round == "") != (isAbsent(p.RequestState) && isAbsent(p.InputResponses)) {
			t.Fatalf("round: wrapper %q, go-sdk requestState %s inputResponses %s", c.round, p.RequestState, p.InputResponses)
		}
	})
}

// sameJSON reports whether a and b are the same JSON value (both absent
// counts as the same).
func sameJSON(a, b json.RawMessage) bool {
	if isAbsent(a) || isAbsent(b) {
		return isAbsent(a) == isAbsent(b)
	}
	ca, errA := agentkey.CanonicalJSON(a)
	cb, errB := agentkey.CanonicalJSON(b)
	if errA != nil || errB != nil {
		return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b))
	}
	return bytes.Equal(ca, cb)
}

// BenchmarkParseCall reads a typical tools/call body.
func BenchmarkParseCall(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_invoice","arguments":{"customer":"acme","amount_cents":4200},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"sessionId":"conv-7","idempotencyKey":"9d5ed678fe57bcca610140957afab571b1ab5aa2f1e3fd4e8a3ba1e1d5dd8ff3"}}}`)
	methods := map[string]bool{"tools/call": true}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := parseCall(body, methods); !ok {
			b.Fatal("not a call")
		}
	}
}

// FuzzMembersRepeated: members reports a repeated name exactly when a
// token-by-token reading of the object meets a name twice.
func FuzzMembersRepeated(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"a":{"a":1,"b":[1,"a",{}]},"b":"}\"{,"}`, `{"A":1,"a":2}`, `null`, `[]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, repeated, err := members(raw)
		if err != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("members read %s as an object", raw)
		}
		seen, want := map[string]bool{}, false
		for dec.More() {
			tok, _ := dec.Token()
			name := tok.(string)
			want = want || seen[name]
			seen[name] = true
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
		}
		if repeated != want || len(m) != len(seen) {
			t.Fatalf("members(%s): repeated %v, %d names; a token reading: %v, %d", raw, repeated, len(m), want, len(seen))
		}
	})
}

// TestDerivedKeyBounded: the key of a call without a key of its own stays
// within idem.MaxKeyLen however long its id and tool name, and ids or names
// that differ anywhere give different keys.
func TestDerivedKeyBounded(t *testing.T) {
	t.Parallel()
	m := New(memstore.New(memstore.Options{}), Options{})(http.NotFoundHandler()).(*wrapper)
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Mcp-Session-Id", "s")
	keys := map[string]string{}
	for _, id := range []string{`"short"`, `"` + strings.Repeat("i", 64) + `"`, `"` + strings.Repeat("i", 65) + `"`, `"` + strings.Repeat("i", 4096) + `"`, `"` + strings.Repeat("i", 4095) + `j"`} {
		for _, name := range []string{"echo", strings.Repeat("n", 128), strings.Repeat("n", 129), strings.Repeat("n", 8192), strings.Repeat("n", 8191) + "m"} {
			c, ok := parseCall([]byte(`{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"`+name+`"}}`), m.methods)
			if !ok {
				t.Fatalf("id %.20s, name %.20s: not a call", id, name)
			}
			req, _, _, ok, err := m.identify(r, c)
			if !ok || err != nil {
				t.Fatalf("id %.20s…, name %.20s…: ok %v, %v", id, name, ok, err)
			}
			if err := req.Validate(); err != nil {
				t.Errorf("id of %d bytes, name of %d bytes: %v", len(id), len(name), err)
			}
			k := req.Key.String()
			if prev, dup := keys[k]; dup {
				t.Errorf("id of %d bytes, name of %d bytes: same key as %s", len(id), len(name), prev)
			}
			keys[k] = fmt.Sprintf("id of %d bytes, name of %d bytes", len(id), len(name))
		}
	}
}

// FuzzMarkReplayed: a replayed result is the recorded one with
// ReplayedMetaKey true in its _meta and nothing else changed; a result that
// is not an object is left as it was.
func FuzzMarkReplayed(f *testing.F) {
	for _, seed := range []string{`{}`, `{"content":[]}`, `{"_meta":{"a":1},"content":[{"type":"text","text":"x"}]}`, `{"_meta":null}`, `{"_meta":{"io.github.idemkit/replayed":false}}`, `[]`, `"s"`, `{"a":1,"a":2}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, result []byte) {
		var before map[string]any
		if json.Unmarshal(result, &before) != nil || before == nil {
			return
		}
		marked, err := markReplayed(result)
		if err != nil {
			t.Fatal(err)
		}
		var after map[string]any
		if err := json.Unmarshal(marked, &after); err != nil {
			t.Fatalf("marked %s is not JSON: %v", marked, err)
		}
		meta, _ := after["_meta"].(map[string]any)
		if meta[ReplayedMetaKey] != true {
			t.Fatalf("marked %s: no marker", marked)
		}
		if m, ok := before["_meta"].(map[string]any); ok {
			for k, v := range m {
				if k != ReplayedMetaKey && fmt.Sprint(meta[k]) != fmt.Sprint(v) {
					t.Fatalf("_meta.%s: %v, was %v", k, meta[k], v)
				}
			}
		}
		delete(before, "_meta")
		delete(after, "_meta")
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Fatalf("marked %s changed the result %s beyond _meta", marked, result)
		}
	})
}

// TestRewriteSSEData: only data lines are rewritten; other lines, blank
// lines and CRLF endings stay as they were.
func TestRewriteSSEData(t *testing.T) {
	t.Parallel()
	in := "id: 1\r\nevent: message\r\ndata: a\r\n\r\n: comment\ndata:b\n\ndata: c"
	got := rewriteSSEData([]byte(in), func(v []byte) []byte { return bytes.ToUpper(v) })
	if want := "id: 1\r\nevent: message\r\ndata: A\r\n\r\n: comment\ndata: B\n\ndata: C"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
