package idem

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestResultJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		res      Result
		contains string
	}{
		{"text body stays readable", Result{Status: 201, Body: []byte(`{"id":1}`)}, `"body":"{\"id\":1}"`},
		{"binary body is base64", Result{Status: 200, Body: []byte{0xff, 0}}, `"body_base64":"/wA="`},
		{"NUL forces base64 (jsonb rejects \\u0000)", Result{Body: []byte("a\x00b")}, `"body_base64"`},
		{"unreplayable", Result{Status: 200, Unreplayable: true}, `"unreplayable":true`},
		{"headers", Result{Header: map[string][]string{"Content-Type": {"text/plain"}}}, `"header":{"Content-Type":["text/plain"]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tc.res)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.contains) {
				t.Errorf("JSON %s does not contain %s", b, tc.contains)
			}
			var back Result
			if err := json.Unmarshal(b, &back); err != nil || !back.Equal(tc.res) {
				t.Errorf("round trip: %+v, %v; want %+v", back, err, tc.res)
			}
		})
	}
	for _, bad := range []string{`{"body":"a","body_base64":"YQ=="}`, `{"body_base64":"!!"}`, `[]`} {
		var r Result
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

// FuzzResultJSON checks that every result survives encoding byte for byte,
// and that the encoding never holds a \u0000 escape, which PostgreSQL's jsonb
// refuses.
func FuzzResultJSON(f *testing.F) {
	f.Add(200, "Content-Type", "application/json", []byte(`{"a":1}`), false)
	f.Add(0, "", "", []byte{0, 0xff}, true)
	f.Add(500, "X", "\x00", []byte("\xed\xa0\x80"), false)
	f.Fuzz(func(t *testing.T, status int, hk, hv string, body []byte, unreplayable bool) {
		res := Result{Status: status, Body: body, Unreplayable: unreplayable}
		if hk != "" {
			res.Header = map[string][]string{hk: {hv}}
		}
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		if strings.Contains(string(b), `\u0000`) {
			t.Fatalf("encoding %s holds \\u0000, which jsonb refuses", b)
		}
		var back Result
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		// Bodies and headers must come back exactly, whatever bytes they
		// hold.
		if !back.Equal(res) {
			t.Fatalf("round trip: %+v, want %+v", back, res)
		}
	})
}

// FuzzUnquoteInPlace checks the in-place JSON string decoder against
// encoding/json on any string JSON accepts: escapes of every kind,
// surrogate pairs, lone surrogates.
func FuzzUnquoteInPlace(f *testing.F) {
	for _, s := range []string{`"plain"`, `"\"\\\/\b\f\n\r\t"`, `"\u00e9\u2028<>&"`, `"\ud83d\ude00"`, `"\ud800x"`, `"\ud800\u0041"`, `"\udc00"`, `""`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, q []byte) {
		// Bodies are stored as strings only when valid UTF-8; encoding/json
		// would replace invalid bytes, unquoteInPlace keeps them.
		var want string
		if !utf8.Valid(q) || json.Unmarshal(q, &want) != nil {
			return
		}
		q = []byte(strings.TrimSpace(string(q)))
		got, err := unquoteInPlace(append([]byte(nil), q...))
		if err != nil {
			t.Fatalf("unquoteInPlace(%s): %v; encoding/json decodes %q", q, err, want)
		}
		if string(got) != want {
			t.Fatalf("unquoteInPlace(%s) = %q, encoding/json decodes %q", q, got, want)
		}
	})
}

// FuzzHeaderJSONMatchesEncodingJSON checks the result header's hand-written
// encoder against encoding/json, byte for byte: escapes of every kind,
// invalid UTF-8, U+2028, HTML characters, nil and empty values, key order.
func FuzzHeaderJSONMatchesEncodingJSON(f *testing.F) {
	f.Add("Content-Type", "application/json", "X-B", "<a & b>\u2028\u2029", false)
	f.Add("", "\x00\b\f\n\r\t\x1f\x7f\"\\", "a", "\xff\xed\xa0\x80é", true)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, nilValue bool) {
		h := map[string][]string{k1: {v1, v2}, k2: {}}
		if nilValue {
			h[k2] = nil
		}
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendHeaderJSON(nil, h); string(got) != string(want) {
			t.Fatalf("appendHeaderJSON(%q) = %s, encoding/json %s", h, got, want)
		}
	})
}
