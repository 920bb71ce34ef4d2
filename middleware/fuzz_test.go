package middleware_test

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/middleware"
)

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func FuzzParseKeyHeader(f *testing.F) {
	for _, seed := range []string{
		`"abc"`, `abc`, ` "abc" `, `""`, ``, `"a\"b\\c"`, `"a\nb"`, `"abc`, `"a","b"`, `a,b`,
		`"abc";p=1`, "\"a\x01b\"", "\"a\tb\"", `"schlüssel"`, `8e03978e-40d5-43e8-bc93-6894a57f9324`,
		`dGVzdA==`, `*tok:en/1`, `a b`, `"\`, `\`, `"" `, "\t\"k\"\t", `"a" ,`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := middleware.ParseKeyHeader(v)
		if err != nil {
			return
		}
		for i := 0; i < len(got); i++ {
			if c := got[i]; c < 0x20 || c > 0x7e {
				t.Fatalf("ParseKeyHeader(%q) = %q: byte 0x%02x is not printable ASCII", v, got, c)
			}
		}
		trimmed := strings.Trim(v, " \t")
		if strings.ContainsRune(got, ',') && !strings.HasPrefix(trimmed, `"`) {
			t.Fatalf("ParseKeyHeader(%q) = %q: a bare list was accepted", v, got)
		}
		// Serialising the key as an sf-string and parsing it again gives
		// the key back.
		again, err := middleware.ParseKeyHeader(quote(got))
		if err != nil || again != got {
			t.Fatalf("round trip of %q through %s: %q, %v", got, quote(got), again, err)
		}
		// A bare value is its own key.
		if !strings.HasPrefix(trimmed, `"`) && got != trimmed {
			t.Fatalf("bare ParseKeyHeader(%q) = %q, want %q", v, got, trimmed)
		}
	})
}
