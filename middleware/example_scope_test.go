package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

type userKey struct{}

// Scoping keys by the user the service's own auth middleware authenticated
// (Principal), with the session cookie as the fallback identity
// (SessionCookies) and the scope hash keyed by a secret (ScopeSecret). Two
// users who send the same key get their own results; a user's retry gets
// theirs.
func ExampleOptions_principal() {
	// The service's auth middleware, which runs before idem's: here it
	// trusts a header; a real one verifies a session or a token.
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if user := r.Header.Get("X-Demo-User"); user != "" {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
			}
			next.ServeHTTP(w, r)
		})
	}
	protect := middleware.New(memstore.New(memstore.Options{}), middleware.Options{
		Principal: func(r *http.Request) string {
			user, _ := r.Context().Value(userKey{}).(string)
			return user
		},
		SessionCookies: []string{"session"},
		ScopeSecret:    []byte("32 random bytes from your secret store"),
	})
	orders := 0
	h := auth(protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		fmt.Fprintf(w, "order %d", orders)
	})))

	post := func(user string) {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item":7}`))
		r.Header.Set("Idempotency-Key", "cart-1")
		r.Header.Set("X-Demo-User", user)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%s: %s (replayed %q)\n", user, w.Body, w.Header().Get("Idempotent-Replayed"))
	}
	post("alice")
	post("bob")
	post("alice")
	// Output:
	// alice: order 1 (replayed "")
	// bob: order 2 (replayed "")
	// alice: order 1 (replayed "true")
}
