package adapter

import (
	"context"
	"errors"
	"log/slog"
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
}

// NewScoper returns the scoper of c's Principal, SessionCookies and
// ScopeSecret, logging to logger (nil discards). A session cookie name that
// is not a cookie name panics, with a message that begins with pkg.
func NewScoper(pkg string, c Scoping, logger *slog.Logger) *Scoper {
	id, err := identity.New(identity.Config{Secret: c.ScopeSecret, Principal: c.Principal, SessionCookies: c.SessionCookies})
	if err != nil {
		panic(pkg + ": Options.SessionCookies: " + err.Error())
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Scoper{Identifier: id, logger: logger}
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
