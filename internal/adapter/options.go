package adapter

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
)

// Common holds the options both adapters declare, field for field: each
// adapter's exported Options keeps them as flat fields (a composite
// literal cannot set the promoted fields of an embedded struct, so
// embedding Common would break middleware.Options{Lease: ...}), copies them
// here, and calls [Common.Engine] and [Common.Scoper] once, in its New. The
// adapters' Options document each field for their users.
type Common struct {
	Lease             time.Duration
	Wait              time.Duration
	StoreTimeout      time.Duration
	RetryAfter        time.Duration
	MaxExecution      time.Duration
	IdleInTransaction time.Duration
	Shutdown          context.Context
	CancelWithClient  bool
	Owner             string
	Logger            *slog.Logger
	Principal         func(*http.Request) string
	SessionCookies    []string
	ScopeSecret       []byte
}

// Engine validates c and returns the engine's options with the defaults
// applied: Lease [idem.DefaultLease], Wait defaultWait (negative: no wait),
// StoreTimeout [engine.DefaultStoreTimeout], RetryAfter
// [engine.DefaultRetryAfter], a discarding Logger. MaxExecution and
// IdleInTransaction are passed on as they are (the engine applies their
// defaults). An invalid field panics with a message that begins with pkg
// and names the field, as misconfiguration does at construction in both
// adapters: a negative Lease, StoreTimeout, RetryAfter or
// IdleInTransaction, or a Lease under a millisecond.
func (c Common) Engine(pkg, adapterName string, defaultWait time.Duration) engine.Options {
	o := engine.Options{
		Adapter:           adapterName,
		Lease:             orDefault(pkg, "Lease", c.Lease, idem.DefaultLease),
		StoreTimeout:      orDefault(pkg, "StoreTimeout", c.StoreTimeout, engine.DefaultStoreTimeout),
		RetryAfter:        orDefault(pkg, "RetryAfter", c.RetryAfter, engine.DefaultRetryAfter),
		MaxExecution:      c.MaxExecution,
		IdleInTransaction: orDefault(pkg, "IdleInTransaction", c.IdleInTransaction, 0),
		Shutdown:          c.Shutdown,
		CancelWithClient:  c.CancelWithClient,
		Owner:             c.Owner,
		Logger:            c.Logger,
	}
	if o.Lease < time.Millisecond {
		panic(fmt.Sprintf("%s: Options.Lease %v is shorter than a millisecond", pkg, o.Lease))
	}
	switch {
	case c.Wait == 0:
		o.Wait = defaultWait
	case c.Wait > 0:
		o.Wait = c.Wait
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func orDefault(pkg, name string, v, def time.Duration) time.Duration {
	switch {
	case v == 0:
		return def
	case v < 0:
		panic(fmt.Sprintf("%s: Options.%s is negative (%v)", pkg, name, v))
	}
	return v
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
