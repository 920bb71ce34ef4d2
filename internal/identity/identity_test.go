package identity

import (
	"encoding/binary"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// request builds a request with the given credentials and session cookie.
func request(auth, apiKey, session string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	if apiKey != "" {
		r.Header.Set("X-Api-Key", apiKey)
	}
	if session != "" {
		r.AddCookie(&http.Cookie{Name: "session", Value: session})
	}
	return r
}

// decode splits a message into its length-prefixed fields, or reports that
// it is not a sequence of them.
func decode(b []byte) ([]string, bool) {
	var fields []string
	for len(b) > 0 {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < n {
			return nil, false
		}
		fields = append(fields, string(b[w:w+int(n)]))
		b = b[w+int(n):]
	}
	return fields, true
}

// FuzzMessageInjective: the message is a sequence of fields that decodes
// back to exactly the parts it was built from, so two requests whose
// identities differ never hash the same message; and a principal's message
// has fewer fields than any credentials message, so no credentials spell
// it.
func FuzzMessageInjective(f *testing.F) {
	f.Add("alice", "Bearer a", "key", "sess", "route")
	f.Add("", "", "", "s", "")
	f.Add("\x00", "\x01\x00", "", "", "x")
	f.Fuzz(func(t *testing.T, principal, auth, apiKey, session, route string) {
		id, err := New(Config{Principal: func(*http.Request) string { return principal }, SessionCookies: []string{"session"}})
		if err != nil {
			t.Fatal(err)
		}
		r := request(auth, apiKey, "")
		if session != "" {
			// Set the header directly: AddCookie drops values net/http
			// would not send.
			r.Header.Set("Cookie", "session="+session)
		}
		msg, err := id.message(nil, r, []string{route})
		if err != nil {
			t.Fatal(err) // a session cookie is named: never refused
		}
		fields, ok := decode(msg)
		if !ok {
			t.Fatalf("message %q does not decode", msg)
		}
		if principal != "" {
			if len(fields) != 2 || fields[0] != principal || fields[1] != route {
				t.Fatalf("principal message decodes to %q", fields)
			}
			return
		}
		if len(fields) != 4 || fields[0] != auth || fields[1] != apiKey || fields[3] != route {
			t.Fatalf("credentials message decodes to %q", fields)
		}
		cookies, ok := decode([]byte(fields[2]))
		if !ok {
			t.Fatalf("cookie field %q does not decode", fields[2])
		}
		var want []string
		for _, c := range r.CookiesNamed("session") {
			want = append(want, c.Value)
		}
		if !slices.Equal(cookies, want) {
			t.Fatalf("cookie field decodes to %q, want the session cookie values %q", cookies, want)
		}
	})
}

func TestScopeRules(t *testing.T) {
	t.Parallel()
	none := func(*http.Request) string { return "" }
	cookieOnly := request("", "", "s1")
	for _, tc := range []struct {
		name    string
		cfg     Config
		r       *http.Request
		refused bool
	}{
		{"cookies, session cookies not named", Config{}, cookieOnly, true},
		{"cookies, principal func gives none", Config{Principal: none}, cookieOnly, true},
		{"cookies, named", Config{SessionCookies: []string{"session"}}, cookieOnly, false},
		{"cookies, none identify anyone", Config{SessionCookies: []string{}}, cookieOnly, false},
		{"cookies and a bearer token", Config{}, request("Bearer x", "", "s1"), false},
		{"no cookies, no credentials", Config{}, request("", "", ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = id.Scope(tc.r)
			if refused := errors.Is(err, ErrUnscopedCookies); refused != tc.refused || err != nil && !refused {
				t.Fatalf("Scope error %v, want refused=%v", err, tc.refused)
			}
		})
	}
	// Distinct identities, distinct scopes; the same identity, one.
	id, _ := New(Config{SessionCookies: []string{"session"}, Secret: []byte("k")})
	scope := func(r *http.Request) string {
		s, err := id.Scope(r, "route")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := scope(request("", "", "alice")), scope(request("", "", "bob"))
	if a == b || a != scope(request("", "", "alice")) {
		t.Errorf("alice %s, bob %s, alice again %s", a, b, scope(request("", "", "alice")))
	}
	if _, err := New(Config{SessionCookies: []string{"a;b"}}); err == nil {
		t.Error("cookie name with ';' accepted")
	}
}

// BenchmarkScope: the cost of the default scope per request, unkeyed and
// keyed, with a session cookie.
func BenchmarkScope(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"sha256", Config{}},
		{"hmac", Config{Secret: []byte("0123456789abcdef0123456789abcdef")}},
		{"hmac+cookie", Config{Secret: []byte("0123456789abcdef0123456789abcdef"), SessionCookies: []string{"session"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			id, _ := New(bc.cfg)
			r := request("Bearer eyJhbGciOiJIUzI1NiJ9.payload.signature", "", "7f1c0e2a9b")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := id.Scope(r, "", "POST", "POST /invoices"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
