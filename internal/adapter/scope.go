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
// service that has not named its session cookies. It is safe for
// concurrent use.
type Scoper struct {
	*identity.Identifier
	logger *slog.Logger
	warn   sync.Once
	// principal is Common.Principal; nil without one.
	principal func(*http.Request) string
}

// Scoper returns the scoper of c's Principal, SessionCookies and
// ScopeSecret, logging to logger (nil discards). A session cookie name that
// is not a cookie name panics, with a message that begins with pkg.
func (c Common) Scoper(pkg string, logger *slog.Logger) *Scoper {
	id, err := identity.New(identity.Config{Secret: c.ScopeSecret, Principal: c.Principal, SessionCookies: c.SessionCookies})
	if err != nil {
		panic(pkg + ": Options.SessionCookies: " + err.Error())
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Scoper{Identifier: id, logger: logger, principal: c.Principal}
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
