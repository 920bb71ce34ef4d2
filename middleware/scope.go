package middleware

import (
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
)

// TypeUnscopedCookies (500): the request carries cookies but no credential
// the middleware knows (Authorization, X-Api-Key, a session cookie named in
// Options.SessionCookies, or a principal from Options.Principal), and the
// service has not said which cookies identify a user. The middleware cannot
// tell whose request it is, so it refuses it rather than put every cookie
// user in one scope. The handler did not run. This is a configuration error
// of the service: set Options.SessionCookies (or Options.Principal).
const TypeUnscopedCookies = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeUnscopedCookies"

// scopeOf returns r's scope: Options.Scope's, or the default, a keyed hash
// (HMAC-SHA-256 with Options.ScopeSecret; SHA-256 without one) of the
// identity (the principal; else Authorization, X-Api-Key and the named
// session cookies), the X-Session-Id header, the method and the route
// (r.Pattern inside an [http.ServeMux] route, the URL path as sent,
// escaped, otherwise).
func (c *config) scopeOf(r *http.Request) (string, error) {
	if c.scope != nil {
		return c.scope(r), nil
	}
	return c.scoper.HTTPScope(r)
}

// refuse answers a request whose scope could not be determined.
func (h *handler) refuse(w http.ResponseWriter, r *http.Request, err error) {
	h.cfg.scoper.Unscoped(r.Context(), err,
		"idempotency middleware refused a request with cookies but no known credential: set Options.SessionCookies to the names of your session cookies (an empty list if no cookie identifies a user) or Options.Principal; logged once")
	h.refuseWith(w, r, idem.Event{Reason: idem.RefusedUnscopedCookies}, problem{Type: TypeUnscopedCookies, Status: http.StatusInternalServerError,
		Detail: fmt.Sprintf("The server cannot tell whose request this is, so it did not process it: %v.", err)})
}
