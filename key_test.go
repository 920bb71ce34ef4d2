package idem

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestKeyEncoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  Key
		want string
	}{
		{"request id", KeyFromRequestID(IntRequestID(7)), "id/7"},
		{"string id", KeyFromRequestID(StringRequestID("abc")), "id/abc"},
		{"for request", KeyForRequest("sess", IntRequestID(1)), "req/sess/1"},
		{"method call", KeyForMethodCall("sess", IntRequestID(1), "tools/call", "create_invoice"), "call/sess/1/tools%2Fcall/create_invoice"},
		{"escapes", KeyFromRequestID(StringRequestID("a/b%c d\x00\xff")), "id/a%2Fb%25c%20d%00%FF"},
		{"empty session", KeyForRequest("", StringRequestID("")), "req//"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.key.String(); got != tc.want {
				t.Errorf("key = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSeedExamplesAreDistinct(t *testing.T) {
	t.Parallel()
	// Naive concatenation would merge these: session 1 with id "2:3" and
	// session 12 with id "3" must not meet; nor may a "/" in a
	// client-chosen id shift the boundary between fields.
	pairs := [][2]Key{
		{KeyForRequest("1", StringRequestID("2:3")), KeyForRequest("12", StringRequestID("3"))},
		{KeyForRequest("a/b", StringRequestID("c")), KeyForRequest("a", StringRequestID("b/c"))},
		{KeyForRequest("session-a", IntRequestID(7)), KeyForRequest("session-b", IntRequestID(7))},
		{KeyForMethodCall("s", IntRequestID(1), "tools/call", "test_audio_content"), KeyForMethodCall("s", IntRequestID(1), "tools/call", "test_embedded_resource")},
		{KeyFromRequestID(StringRequestID("req/s/1")), KeyForRequest("s", IntRequestID(1))},
		{KeyFromRequestID(StringRequestID("%2F")), KeyFromRequestID(StringRequestID("/"))},
	}
	for _, p := range pairs {
		if p[0] == p[1] {
			t.Errorf("distinct tuples gave one key %q", p[0])
		}
	}
}

func TestNumericAndStringIDsThatPrintTheSameAreOneKey(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`1`, `"1"`, `1.0`, `1e0`, `10e-1`, ` 1 `} {
		id, err := ParseRequestID(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("ParseRequestID(%s): %v", raw, err)
		}
		if got, want := KeyForRequest("s", id), KeyForRequest("s", IntRequestID(1)); got != want {
			t.Errorf("id %s: key %q, want %q", raw, got, want)
		}
	}
}

func TestParseRequestID(t *testing.T) {
	t.Parallel()
	valid := map[string]string{
		`0`: "0", `-0`: "0", `-12`: "-12", `1.5`: "1.5", `"x y"`: "x y", `""`: "",
		`123456789012345678901234567890`: "123456789012345678901234567890",
		`1e3`:                            "1000", `2.5e-1`: "0.25", `"\u00e9"`: "é",
	}
	for raw, want := range valid {
		id, err := ParseRequestID(json.RawMessage(raw))
		if err != nil {
			t.Errorf("ParseRequestID(%s): %v", raw, err)
			continue
		}
		if id.String() != want {
			t.Errorf("ParseRequestID(%s) = %q, want %q", raw, id, want)
		}
		out, err := json.Marshal(id)
		if err != nil {
			t.Errorf("marshal %s: %v", raw, err)
		}
		back, err := ParseRequestID(out)
		if err != nil || back != id {
			t.Errorf("round trip of %s: %s -> %v, %v", raw, out, back, err)
		}
	}
	for _, raw := range []string{``, `null`, `true`, `false`, `{}`, `[]`, `[1]`, `"unterminated`, `1 2`, `01x`, `-`, `NaN`, `1e1000000000000`, `199e99999999`, `1e1001`, strings.Repeat("9", 257)} {
		if id, err := ParseRequestID(json.RawMessage(raw)); !errors.Is(err, ErrInvalidRequestID) {
			t.Errorf("ParseRequestID(%q) = %v, %v; want ErrInvalidRequestID", raw, id, err)
		}
	}
	if (RequestID{}).IsZero() != true || IntRequestID(0).IsZero() {
		t.Error("IsZero wrong")
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	good := []string{"a", strings.Repeat("k", MaxHeaderKeyLen), "8e03978e-40d5-43e8-bc93-6894a57f9324", "with space", `"quoted"`, "%/"}
	for _, s := range good {
		if _, err := ParseClientKey(s); err != nil {
			t.Errorf("ParseClientKey(%q): %v", s, err)
		}
	}
	bad := []string{"", strings.Repeat("k", MaxHeaderKeyLen+1), "tab\there", "nl\n", "del\x7f", "é", "\x00"}
	for _, s := range bad {
		_, err := ParseClientKey(s)
		var ik *InvalidKeyError
		if !errors.As(err, &ik) || !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParseClientKey(%q) = %v, want *InvalidKeyError", s, err)
		}
	}
}

func TestParseStoredKey(t *testing.T) {
	t.Parallel()
	for _, k := range []Key{KeyFromRequestID(IntRequestID(1)), KeyForMethodCall("s", IntRequestID(1), "m", "t/x")} {
		got, err := ParseStoredKey(k.String())
		if err != nil || got != k {
			t.Errorf("ParseStoredKey(%q) = %q, %v", k, got, err)
		}
	}
	for _, s := range []string{"", "nokey", "other/x", strings.Repeat("a", MaxKeyLen+1)} {
		if _, err := ParseStoredKey(s); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParseStoredKey(%q) = %v, want ErrInvalidKey", s, err)
		}
	}
}

// FuzzKeyInjective checks that the key encoding has a left inverse: from any
// key, splitKey recovers the constructor and its exact arguments. A function
// with a left inverse is injective, so distinct tuples never collide,
// whatever bytes they hold.
func FuzzKeyInjective(f *testing.F) {
	f.Add(uint8(0), "s", "1", "tools/call", "t")
	f.Add(uint8(1), "1", "2:3", "", "")
	f.Add(uint8(2), "a/b", "c%2F", "tools/call", "x/y")
	f.Add(uint8(2), "\x00", "\xff\xfe", "%", "%25")
	f.Add(uint8(3), "", "Idempotency Key/%", "", "")
	f.Add(uint8(4), "", "key/a", "", "0f/%")
	f.Fuzz(func(t *testing.T, form uint8, session, id, method, target string) {
		var k Key
		var tag string
		var want []string
		switch form % 5 {
		case 0:
			k, tag, want = KeyFromRequestID(StringRequestID(id)), "id", []string{id}
		case 1:
			k, tag, want = KeyForRequest(SessionID(session), StringRequestID(id)), "req", []string{session, id}
		case 2:
			k, tag, want = KeyForMethodCall(SessionID(session), StringRequestID(id), method, target), "call", []string{session, id, method, target}
		case 3:
			var err error
			if k, err = ParseClientKey(id); err != nil {
				return
			}
			tag, want = "key", []string{id}
		case 4:
			var err error
			if k, err = ParseClientRoundKey(id, target); err != nil {
				return
			}
			tag, want = "round", []string{id, target}
		}
		gotTag, got, err := splitKey(k.String())
		if err != nil {
			t.Fatalf("splitKey(%q): %v", k, err)
		}
		if gotTag != tag || !slices.Equal(got, want) {
			t.Fatalf("key %q decodes to %q %q, want %q %q", k, gotTag, got, tag, want)
		}
		for i := 0; i < len(k.String()); i++ {
			if c := k.String()[i]; c <= 0x20 || c >= 0x7f {
				t.Fatalf("key %q holds byte 0x%02x: keys must be printable ASCII", k, c)
			}
		}
	})
}

// FuzzParseRequestID checks that parsing never panics, that every id it
// accepts round-trips through MarshalJSON, and that the key of a numeric id
// equals the key of the same text as a string id.
func FuzzParseRequestID(f *testing.F) {
	for _, s := range []string{`1`, `"1"`, `-0`, `1.50`, `1e400`, `"\ud800"`, `null`, `{"a":1}`, `1e99999999999`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		id, err := ParseRequestID(raw)
		if err != nil {
			return
		}
		out, err := json.Marshal(id)
		if err != nil {
			t.Fatalf("marshal %q: %v", raw, err)
		}
		back, err := ParseRequestID(out)
		if err != nil || back.String() != id.String() {
			t.Fatalf("round trip %q -> %s -> %v, %v", raw, out, back, err)
		}
		if KeyFromRequestID(id) != KeyFromRequestID(StringRequestID(id.String())) {
			t.Fatalf("numeric and string forms of %q differ as keys", id)
		}
	})
}
