package adapter

import (
	"fmt"
	"net/http"
)

// Scoping holds the options of the default scope that both adapters
// declare, field for field: each
// adapter copies them here and calls [NewScoper] once, in its New. The
// adapters' Options document each field for their users; the engine's
// settings they share are one field of theirs, engine.Options.
type Scoping struct {
	Principal      func(*http.Request) string
	SessionCookies []string
	ScopeSecret    []byte
	// ScopeByCredentials is the adapters' opt-in to credentials as the
	// identity: it silences the warning about a nil Principal.
	ScopeByCredentials bool
}

// Positive returns v, or def when v is zero, and panics, naming pkg and the
// field, when v is negative: the idiom of the adapters' size limits.
func Positive[T ~int | ~int64](pkg, name string, v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		panic(fmt.Sprintf("%s: Options.%s is negative (%d)", pkg, name, v))
	}
	return v
}
