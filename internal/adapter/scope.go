package adapter

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	"github.com/idemkit/idem/internal/identity"
)

// Scoper names the caller of every request an adapter protects (see
// package identity), and refuses, with a log line the first time, a
// request it cannot name: one that carries cookies but no credential, to a
// service that has not named its session cookies. At the first request
// whose identity is its credentials it warns, once, of what the
// configuration leaves to chance: a nil Principal (a refreshed token is a
// new scope) unless the service opted in with ScopeByCredentials, and an
// empty ScopeSecret (the hash can be reversed by guessing). It is safe for
// concurrent use.
type Scoper struct {
	*identity.Identifier
	logger      *slog.Logger
	warn        sync.Once
	warnScoping sync.Once
	// principal is Scoping.Principal; nil without one.
	principal func(*http.Request) string
}

// NewScoper returns the scoper of c, logging to logger, or to
// [slog.Default] when logger is nil: a configuration that refuses or
// re-runs requests must reach the operators even of a service that set no
// logger. A session cookie name that is not a cookie name panics, with a
// message that begins with pkg.
func NewScoper(pkg string, c Scoping, logger *slog.Logger) *Scoper {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Scoper{logger: logger}
	cfg := identity.Config{Secret: c.ScopeSecret, Principal: c.Principal, SessionCookies: c.SessionCookies}
	var warnings []string
	if c.Principal == nil && !c.ScopeByCredentials {
		warnings = append(warnings, pkg+": requests carry credentials (Authorization, X-Api-Key or a session cookie) and Options.Principal is not set, so the scope of a key is the credential itself: a retry sent with a refreshed token is a new request and runs again. Set Options.Principal to the user or tenant your authentication found, or Options.ScopeByCredentials if the credentials never change between retries (long-lived API keys); logged once")
	}
	if len(c.ScopeSecret) == 0 {
		warnings = append(warnings, pkg+": Options.ScopeSecret is not set, so the credentials in a scope are hashed without a key, and anyone who can read the table can test guesses of a low-entropy one (a Basic password, a short API key). Set it to 32 random bytes, the same in every instance and across restarts (a secret that changes re-runs every retry that straddles the change); logged once")
	}
	if len(warnings) > 0 {
		cfg.OnCredentials = func(r *http.Request) {
			s.warnScoping.Do(func() {
				for _, msg := range warnings {
					s.logger.LogAttrs(r.Context(), slog.LevelWarn, msg)
				}
			})
		}
	}
	id, err := identity.New(cfg)
	if err != nil {
		panic(pkg + ": Options.SessionCookies: " + err.Error())
	}
	s.Identifier = id
	s.principal = c.Principal
	return s
}

// Unscoped reports whether err, a scope's error, is
// [identity.ErrUnscopedCookies], the configuration error the adapter
// refuses the request for; the first time, it logs msg at error level, so
// the service's operators learn what to configure without a line per
// request.
func (s *Scoper) Unscoped(ctx context.Context, err error, msg string) bool {
	if !errors.Is(err, identity.ErrUnscopedCookies) {
		return false
	}
	s.warn.Do(func() { s.logger.LogAttrs(ctx, slog.LevelError, msg) })
	return true
}

// Caller is the caller label of r that a claim stores (idem.Labels.Caller):
// the principal, when the service's Principal names one; empty otherwise,
// and for a nil Scoper (a service's own scope function). Credentials and
// session ids are secrets and are never a label.
func (s *Scoper) Caller(r *http.Request) string {
	if s == nil || s.principal == nil {
		return ""
	}
	return s.principal(r)
}
