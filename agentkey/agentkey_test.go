package agentkey_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"testing"

	"github.com/idemkit/idem/agentkey"
)

type agentKeyVector struct {
	Name      string `json:"name"`
	Session   string `json:"session"`
	Turn      string `json:"turn"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	Canonical string `json:"canonical"`
	Key       string `json:"key"`
}

func loadAgentKeyVectors(t testing.TB) []agentKeyVector {
	t.Helper()
	data, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []agentKeyVector
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatal("no vectors")
	}
	return vs
}

// TestAgentKeyVectors checks the published vectors: the key is the SHA-256 of
// the documented canonical preimage, and Derive computes it.
func TestAgentKeyVectors(t *testing.T) {
	t.Parallel()
	for _, v := range loadAgentKeyVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			sum := sha256.Sum256([]byte(v.Canonical))
			if got := hex.EncodeToString(sum[:]); got != v.Key {
				t.Fatalf("vector inconsistent: sha256(canonical) = %s, key = %s", got, v.Key)
			}
			got, err := agentkey.Derive(v.Session, v.Turn, v.Tool, json.RawMessage(v.Arguments))
			if err != nil {
				t.Fatal(err)
			}
			if got != v.Key {
				t.Errorf("Derive = %s, want %s (canonical %s)", got, v.Key, v.Canonical)
			}
		})
	}
}

func TestAgentKeyDistinguishes(t *testing.T) {
	t.Parallel()
	base := func() (string, string, string, json.RawMessage) {
		return "conv", "1", "create_invoice", json.RawMessage(`{"customer":"ACME","amount_cents":100}`)
	}
	s, turn, tool, args := base()
	want, err := agentkey.Derive(s, turn, tool, args)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		session    string
		turn, tool string
		args       string
		same       bool
	}{
		{"identical", s, turn, tool, string(args), true},
		{"reordered and spaced", s, turn, tool, ` { "amount_cents" : 100 , "customer" : "ACME" } `, true},
		{"null member added", s, turn, tool, `{"customer":"ACME","amount_cents":100,"memo":null}`, true},
		{"empty string member added", s, turn, tool, `{"customer":"ACME","amount_cents":100,"memo":""}`, true},
		{"number spelled differently", s, turn, tool, `{"customer":"ACME","amount_cents":1e2}`, true},
		{"other session", "conv2", turn, tool, string(args), false},
		{"other turn", s, "2", tool, string(args), false},
		{"other tool", s, turn, "delete_invoice", string(args), false},
		{"other argument", s, turn, tool, `{"customer":"ACME","amount_cents":101}`, false},
		{"whitespace string is not empty", s, turn, tool, `{"customer":"ACME","amount_cents":100,"memo":" "}`, false},
		{"false is not ignored", s, turn, tool, `{"customer":"ACME","amount_cents":100,"memo":false}`, false},
		// Fields are delimited, so moving a character across a boundary
		// changes the key.
		{"boundary shift", "con", "v1", tool, string(args), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := agentkey.Derive(tt.session, tt.turn, tt.tool, json.RawMessage(tt.args))
			if err != nil {
				t.Fatal(err)
			}
			if (got == want) != tt.same {
				t.Errorf("Derive = %s, base %s; want same=%v", got, want, tt.same)
			}
		})
	}
}

func TestAgentKeyInvalidArguments(t *testing.T) {
	t.Parallel()
	for _, args := range []string{`[1,2]`, `"x"`, `3`, `{"a":1`, `{"a":1}{"b":2}`, `{"a":1,"a":2}`, `{]`} {
		_, err := agentkey.Derive("s", "t", "tool", json.RawMessage(args))
		if !errors.Is(err, agentkey.ErrInvalidJSON) {
			t.Errorf("Derive(%s) error = %v, want ErrInvalidJSON", args, err)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`{"b":1,"a":[true,false,null]}`, `{"a":[true,false,null],"b":1}`},
		{` 1.0 `, `1`},
		{`-0`, `0`},
		{`100e-2`, `1`},
		{`123456789012345678901234567890`, `1.2345678901234567890123456789e+29`},
		{`100000000000000000000`, `100000000000000000000`},
		{`1e21`, `1e+21`},
		{`0.000001`, `0.000001`},
		{`-25e-8`, `-2.5e-7`},
		{`12.50`, `12.5`},
		{`0.0e5`, `0`},
		{`1000000001200520800e700`, `1.0000000012005208e+718`},
		{`"\u003c\u2028\/"`, "\"<\u2028/\""},
		{`{"\u00e9":1,"e":2,"z":3}`, `{"e":2,"z":3,"é":1}`},
		{`{"n":{"y":null,"x":""}}`, `{"n":{"x":"","y":null}}`},
	}
	for _, tt := range tests {
		got, err := agentkey.CanonicalJSON(json.RawMessage(tt.in))
		if err != nil {
			t.Errorf("CanonicalJSON(%s): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("CanonicalJSON(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
	deep := make([]byte, 0, 2000)
	for range 1000 {
		deep = append(deep, '[')
	}
	for _, bad := range [][]byte{deep, []byte(`1e1234567890`), []byte(`{"a":1,"a":1}`), []byte(`1 2`), nil} {
		if _, err := agentkey.CanonicalJSON(bad); !errors.Is(err, agentkey.ErrInvalidJSON) {
			t.Errorf("CanonicalJSON(%.20q): error = %v, want ErrInvalidJSON", bad, err)
		}
	}
}

// FuzzCanonicalJSON checks the canonical form's laws on any input: it is
// valid JSON, canonicalising it again changes nothing, and it means what the
// input means (both decode to equal values, numbers compared by value).
func FuzzCanonicalJSON(f *testing.F) {
	for _, seed := range []string{
		`{"b":2,"a":"x","c":null,"d":""}`, `[1,1.0,1e0,-0.5e-3]`, `"\u00e9\t\u0001<>"`,
		`{"a":{"c":[{"e":1,"d":2}],"b":true}}`, `null`, `{"a":1,"a":2}`, `12345678901234567890e-10`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		canon, err := agentkey.CanonicalJSON(in)
		if err != nil {
			if !errors.Is(err, agentkey.ErrInvalidJSON) {
				t.Fatalf("error %v does not wrap ErrInvalidJSON", err)
			}
			return
		}
		if !json.Valid(canon) {
			t.Fatalf("canonical form %q is not valid JSON", canon)
		}
		again, err := agentkey.CanonicalJSON(canon)
		if err != nil || string(again) != string(canon) {
			t.Fatalf("not idempotent: %q -> %q (%v)", canon, again, err)
		}
		a, b := decodeNumbers(t, in), decodeNumbers(t, canon)
		if !sameJSON(a, b) {
			t.Fatalf("canonical form %q means something else than %q", canon, in)
		}
	})
}

func decodeNumbers(t *testing.T, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%q accepted by CanonicalJSON but not by encoding/json: %v", data, err)
	}
	return v
}

// sameJSON reports whether two decoded values are equal, numbers compared
// by value.
func sameJSON(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		fx, _, errx := big.ParseFloat(string(x), 10, 4096, big.ToNearestEven)
		fy, _, erry := big.ParseFloat(string(y), 10, 4096, big.ToNearestEven)
		return errx == nil && erry == nil && fx.Cmp(fy) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameJSON(v, w) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}
