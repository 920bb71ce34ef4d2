package middleware

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/idemkit/idem/internal/identity"
)

// TypeUnscopedCookies (500): the request carries cookies but no credential
// the middleware knows (Authorization, X-Api-Key, a session cookie named in
// Options.SessionCookies, or a principal from Options.Principal), and the
// service has not said which cookies identify a user. The middleware cannot
// tell whose request it is, so it refuses it rather than put every cookie
// user in one scope. The handler did not run. This is a configuration error
// of the service: set Options.SessionCookies (or Options.Principal).
const TypeUnscopedCookies = "https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeUnscopedCookies"

// scoper is the scope of the middleware's configuration: the service's own
// ScopeFunc, or the default over an identity.Identifier.
type scoper struct {
	custom ScopeFunc
	id     *identity.Identifier
	warn   sync.Once
}

// newScoper applies the scope options. It panics when a custom Scope is
// combined with the options that configure the default one: they would be
// silently ignored, and a secret believed in use would not be.
func newScoper(o Options) *scoper {
	if o.Scope != nil {
		if o.Principal != nil || o.SessionCookies != nil || len(o.ScopeSecret) > 0 {
			panic("middleware: Options.Scope replaces the default scope; Principal, SessionCookies and ScopeSecret configure the default and cannot be combined with it")
		}
		return &scoper{custom: o.Scope}
	}
	id, err := identity.New(identity.Config{Secret: o.ScopeSecret, Principal: o.Principal, SessionCookies: o.SessionCookies})
	if err != nil {
		panic("middleware: Options.SessionCookies: " + err.Error())
	}
	return &scoper{id: id}
}

// scope returns r's scope. The default is a keyed hash (HMAC-SHA-256 with
// Options.ScopeSecret; SHA-256 without one) of the identity (the principal;
// else Authorization, X-Api-Key and the named session cookies), the
// X-Session-Id header, the method and the route (r.Pattern inside an
// [http.ServeMux] route, the URL path otherwise).
func (s *scoper) scope(r *http.Request) (string, error) {
	if s.custom != nil {
		return s.custom(r), nil
	}
	return s.id.HTTPScope(r)
}

// refuse answers a request whose scope could not be determined.
func (h *handler) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, identity.ErrUnscopedCookies) {
		h.cfg.scoper.warn.Do(func() {
			h.cfg.logger.LogAttrs(r.Context(), slog.LevelError,
				"idempotency middleware refused a request with cookies but no known credential: set Options.SessionCookies to the names of your session cookies (an empty list if no cookie identifies a user) or Options.Principal; logged once")
		})
	}
	writeProblem(w, problem{Type: TypeUnscopedCookies, Status: http.StatusInternalServerError,
		Detail: fmt.Sprintf("The server cannot tell whose request this is, so it did not process it: %v.", err)}, "")
}
