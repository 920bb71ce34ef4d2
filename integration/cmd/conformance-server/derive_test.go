package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func derivedKey(t *testing.T, salt, body string) (string, bool) {
	t.Helper()
	out, ok := withDerivedKey([]byte(salt), []byte(body))
	if !ok {
		return "", false
	}
	var req struct {
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal(out, &req); err != nil {
		t.Fatal(err)
	}
	k, _ := req.Params.Meta["idempotencyKey"].(string)
	return k, true
}

// The rounds of one call share a derived key; another call, another salt
// (another server run) or another _meta gets another; a call that carries
// a key, and anything but tools/call, is left alone.
func TestWithDerivedKey(t *testing.T) {
	const meta = `"_meta":{"progressToken":1}`
	round1 := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":1},` + meta + `}}`
	round2 := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t","arguments":{"a":1},"requestState":"s","inputResponses":{},` + meta + `}}`
	k1, ok1 := derivedKey(t, "salt", round1)
	k2, ok2 := derivedKey(t, "salt", round2)
	if !ok1 || !ok2 || !strings.HasPrefix(k1, "derived-") || k1 != k2 {
		t.Fatalf("rounds got %q and %q, want one derived key", k1, k2)
	}
	for name, body := range map[string]string{
		"other arguments": strings.Replace(round1, `"a":1`, `"a":2`, 1),
		"other _meta":     strings.Replace(round1, `"progressToken":1`, `"progressToken":2`, 1),
	} {
		if k, _ := derivedKey(t, "salt", body); k == k1 {
			t.Errorf("%s: same key %q", name, k)
		}
	}
	if k, _ := derivedKey(t, "other salt", round1); k == k1 {
		t.Errorf("another salt: same key %q", k)
	}
	for name, body := range map[string]string{
		"_meta key":  `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"idempotencyKey":"mine"}}}`,
		"params key": `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","idempotencyKey":"mine"}}`,
		"tools/list": `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		"not JSON":   `{`,
	} {
		if _, ok := derivedKey(t, "salt", body); ok {
			t.Errorf("%s: a key was added", name)
		}
	}
}
