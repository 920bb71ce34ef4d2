package middleware_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

func cookie(name, value string) reqOpt {
	return func(r *http.Request) { r.AddCookie(&http.Cookie{Name: name, Value: value}) }
}

// TestCookieUsersNeverShareAScope: a browser application whose users
// authenticate by session cookie. A scope of Authorization, X-Api-Key and
// X-Session-Id alone would give every cookie user one scope per route, and
// user B, sending user A's key and body, would receive A's recorded
// response. B never gets A's answer.
func TestCookieUsersNeverShareAScope(t *testing.T) {
	t.Parallel()
	f := setup(t, func(*testing.T) storeKit { return storeKit{store: memstore.New(memstore.Options{})} }, middleware.Options{}, nil)
	a := serve(f.h, newReq("POST", "/orders", `{"item":1}`, cookie("session", "alice-secret"), key("k")))
	b := serve(f.h, newReq("POST", "/orders", `{"item":1}`, cookie("session", "bob-secret"), key("k")))
	if a.Code == http.StatusCreated && b.Header().Get("Idempotent-Replayed") == "true" {
		t.Fatalf("bob received alice's recorded answer: %s", b.Body)
	}
	// Without SessionCookies the middleware cannot tell cookie users apart,
	// so it refuses them, loudly, rather than guess.
	wantProblem(t, a, http.StatusInternalServerError, middleware.TypeUnscopedCookies)
	wantProblem(t, b, http.StatusInternalServerError, middleware.TypeUnscopedCookies)
	wantCalls(t, f, 0)
	// A request with a credential header is scoped by it, cookies or not.
	wantStatus(t, serve(f.h, newReq("POST", "/orders", `{}`, cookie("_ga", "x"), hdr("Authorization", "Bearer t"), key("k"))), http.StatusCreated)
}

func TestSessionCookieScopes(t *testing.T) {
	t.Parallel()
	newStore := func(*testing.T) storeKit { return storeKit{store: memstore.New(memstore.Options{})} }
	t.Run("named session cookie", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{SessionCookies: []string{"session"}}, nil)
		alice := func() *http.Request {
			return newReq("POST", "/orders", `{"item":1}`, cookie("session", "alice-secret"), cookie("_ga", "1"), key("k"))
		}
		first := serve(f.h, alice())
		bob := serve(f.h, newReq("POST", "/orders", `{"item":1}`, cookie("session", "bob-secret"), key("k")))
		wantStatus(t, first, http.StatusCreated)
		wantStatus(t, bob, http.StatusCreated)
		if bob.Header().Get("Idempotent-Replayed") != "" {
			t.Fatal("bob got a replay of alice's request")
		}
		// Alice retries; an analytics cookie changed meanwhile: still her key.
		retry := serve(f.h, newReq("POST", "/orders", `{"item":1}`, cookie("session", "alice-secret"), cookie("_ga", "2"), key("k")))
		wantReplay(t, first, retry)
		wantCalls(t, f, 2)
		// Cookies other than the session cookie identify nobody: anonymous.
		wantStatus(t, serve(f.h, newReq("POST", "/orders", `{}`, cookie("_ga", "1"), key("anon"))), http.StatusCreated)
	})
	t.Run("no cookie identifies anyone", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{SessionCookies: []string{}}, nil)
		first := serve(f.h, newReq("POST", "/a", `{}`, cookie("_ga", "1"), key("k")))
		wantStatus(t, first, http.StatusCreated)
		wantReplay(t, first, serve(f.h, newReq("POST", "/a", `{}`, cookie("_ga", "2"), key("k"))))
		wantCalls(t, f, 1)
	})
	t.Run("principal from the context", func(t *testing.T) {
		t.Parallel()
		type userKey struct{}
		auth := func(next http.Handler) http.Handler { // the service's auth middleware
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				user, _, _ := strings.Cut(r.Header.Get("Authorization"), ":")
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
			})
		}
		f := setup(t, newStore, middleware.Options{Principal: func(r *http.Request) string {
			u, _ := r.Context().Value(userKey{}).(string)
			return u
		}}, nil)
		h := auth(f.h)
		first := serve(h, newReq("POST", "/a", `{}`, hdr("Authorization", "alice:token-1"), key("k")))
		wantStatus(t, serve(h, newReq("POST", "/a", `{}`, hdr("Authorization", "bob:token-1"), key("k"))), http.StatusCreated)
		// Alice's token was refreshed between her retries: same principal.
		wantReplay(t, first, serve(h, newReq("POST", "/a", `{}`, hdr("Authorization", "alice:token-2"), key("k"))))
		wantCalls(t, f, 2)
		// No principal and only cookies (what an auth middleware mounted
		// after idem looks like): refused, not scoped with everyone.
		wantProblem(t, serve(h, newReq("POST", "/a", `{}`, cookie("session", "carol"), key("k"))), http.StatusInternalServerError, middleware.TypeUnscopedCookies)
		wantCalls(t, f, 2)
	})
}

func TestScopeSecret(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	var scopes []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := middleware.TokenFrom(r.Context())
		scopes = append(scopes, tok.Scope)
	})
	field := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	var msg []byte
	for _, s := range []string{"Basic dXNlcjpodW50ZXIy", "", "", "POST", "/a"} {
		msg = field(msg, s)
	}
	for i, secret := range [][]byte{nil, []byte("secret-1"), []byte("secret-2")} {
		h := middleware.New(store, middleware.Options{ScopeSecret: secret})(handler)
		wantStatus(t, serve(h, newReq("POST", "/a", `{}`, hdr("Authorization", "Basic dXNlcjpodW50ZXIy"), key("k"))), http.StatusOK)
		if len(scopes) != i+1 {
			t.Fatalf("secret %d: the handler did not run: another secret, another scope", i)
		}
		var want string
		if secret == nil {
			// Unkeyed: the scope DefaultScope computed before ScopeSecret
			// existed, so an upgrade keeps every recorded key.
			sum := sha256.Sum256(msg)
			want = hex.EncodeToString(sum[:])
		} else {
			mac := hmac.New(sha256.New, secret)
			mac.Write(msg)
			want = hex.EncodeToString(mac.Sum(nil))
		}
		if scopes[i] != want {
			t.Errorf("secret %q: scope %s, want %s", secret, scopes[i], want)
		}
	}
}

func TestScopeOptionsPanic(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	for name, opts := range map[string]middleware.Options{
		"scope and principal":      {Scope: fixedScope, Principal: func(*http.Request) string { return "" }},
		"scope and cookies":        {Scope: fixedScope, SessionCookies: []string{}},
		"scope and secret":         {Scope: fixedScope, ScopeSecret: []byte("s")},
		"cookie name with a space": {SessionCookies: []string{"my session"}},
		"empty cookie name":        {SessionCookies: []string{""}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			middleware.New(store, opts)
		})
	}
}

// TestEscapedPathIdentifies: a request is identified by its path as sent,
// escaped: /items/a%2Fb and /items/a/b are two resources, so a key reused
// across them is never answered with the other's response. Inside a
// ServeMux route both have the route's scope, and the fingerprint tells
// them apart (422); outside one, the default scope does.
func TestEscapedPathIdentifies(t *testing.T) {
	t.Parallel()
	if defaultFingerprintOf("/items/a%2Fb") == defaultFingerprintOf("/items/a/b") {
		t.Error("DefaultFingerprint: /items/a%2Fb and /items/a/b have one fingerprint")
	}
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, r.URL.EscapedPath())
	})
	mux := http.NewServeMux()
	mux.Handle("POST /items/{id...}", middleware.New(memstore.New(memstore.Options{}), middleware.Options{})(echo))
	bare := middleware.New(memstore.New(memstore.Options{}), middleware.Options{})(echo)
	for name, h := range map[string]http.Handler{"in a ServeMux route": mux, "outside one": bare} {
		first := serve(h, newReq("POST", "/items/a%2Fb", `{}`, key("k")))
		wantStatus(t, first, http.StatusCreated)
		second := serve(h, newReq("POST", "/items/a/b", `{}`, key("k")))
		if second.Header().Get("Idempotent-Replayed") != "" || strings.Contains(second.Body.String(), "%2F") {
			t.Errorf("%s: POST /items/a/b with the key of POST /items/a%%2Fb was answered %d %q, a replay of the other resource", name, second.Code, second.Body)
		}
		if name == "in a ServeMux route" && second.Code != http.StatusUnprocessableEntity {
			t.Errorf("%s: a key reused for another path: %d, want 422", name, second.Code)
		}
	}
}

// defaultFingerprintOf is DefaultFingerprint of a POST to target.
func defaultFingerprintOf(target string) string {
	return middleware.DefaultFingerprint(httptest.NewRequest("POST", target, nil), nil)
}

// TestScopingWarnings: a service whose requests carry credentials and that
// set no Principal is told once, at the first such request, that a
// refreshed token re-runs a retry, with the remedy; likewise for a missing
// ScopeSecret. A Principal, or the opt-in ScopeByCredentials, and a secret
// silence them; requests without credentials warn of nothing.
func TestScopingWarnings(t *testing.T) {
	t.Parallel()
	const principalWarning, secretWarning = "Options.Principal is not set", "Options.ScopeSecret is not set"
	secret := []byte("0123456789abcdef0123456789abcdef")
	for _, tc := range []struct {
		name string
		opts middleware.Options
		want []string
	}{
		{"nothing set", middleware.Options{}, []string{principalWarning, secretWarning}},
		{"secret only", middleware.Options{ScopeSecret: secret}, []string{principalWarning}},
		{"principal", middleware.Options{ScopeSecret: secret, Principal: func(*http.Request) string { return "" }}, nil},
		{"opted in", middleware.Options{ScopeByCredentials: true}, []string{secretWarning}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs testlog.Buffer
			tc.opts.Engine.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			h := middleware.New(memstore.New(memstore.Options{}), tc.opts)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}))
			serve(h, newReq("POST", "/orders", `{}`, key("anonymous")))
			if logs.String() != "" {
				t.Errorf("a request without credentials logged %q", logs.String())
			}
			for i := range 3 {
				serve(h, newReq("POST", "/orders", `{}`, hdr("Authorization", fmt.Sprintf("Bearer t%d", i)), key(fmt.Sprintf("k%d", i))))
			}
			got := logs.String()
			for _, w := range tc.want {
				if n := strings.Count(got, w); n != 1 {
					t.Errorf("%q logged %d times, want once: %s", w, n, got)
				}
			}
			if n := strings.Count(got, "level=WARN"); n != len(tc.want) {
				t.Errorf("%d warnings, want %d: %s", n, len(tc.want), got)
			}
		})
	}
}
