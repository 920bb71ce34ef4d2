package mcphttp

import (
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/adapter"
)

// Defaults of [Options].
const (
	// DefaultWait is how long a duplicate waits for the original's result
	// when Options.Engine.Wait is zero.
	DefaultWait = 30 * time.Second
	// DefaultMaxBodyBytes is the largest POST body read when
	// Options.MaxBodyBytes is zero: go-sdk's default request body limit.
	DefaultMaxBodyBytes = 4 << 20
	// DefaultMaxRecordBytes is the largest response recorded for replay
	// when Options.MaxRecordBytes is zero.
	DefaultMaxRecordBytes = 1 << 20
)

// Options configures the wrapper. The zero value is ready to use.
type Options struct {
	// Methods lists the JSON-RPC methods deduplicated. Nil means
	// tools/call only. Methods without side effects (tools/list,
	// resources/read, ...) gain nothing from it.
	Methods []string
	// Engine holds the settings of claims, leases and timeouts that both
	// adapters share: Lease, Wait, StoreTimeout, RetryAfter, MaxExecution,
	// IdleInTransaction, Shutdown, CancelWithClient, Owner and Logger, each
	// documented on [engine.Options]. Here the engine's work is a
	// deduplicated call: a call cut off (lost lease, MaxExecution,
	// Shutdown, CancelWithClient) is told to stop as "Cut off" in the
	// package documentation describes, and is recorded only if the wrapper
	// saw a whole response it records (a tool result without isError).
	// Wait also bounds how long a session's DELETE waits for the calls
	// running on the session (see "Closed sessions"); a zero Wait means
	// [DefaultWait], 30 s, longer than package middleware's because an
	// agent told a call is in flight often hands the error to its model
	// rather than retrying (see docs/design.md, "Why the adapters wait for
	// different times"). The zero value is usable.
	Engine engine.Options
	// MaxBodyBytes bounds how much of a POST body the wrapper reads to
	// decide whether it is a call to dedupe. A longer body passes through
	// to the inner handler intact and is not deduplicated. Zero means
	// [DefaultMaxBodyBytes]; negative panics.
	MaxBodyBytes int64
	// MaxRecordBytes bounds the JSON-RPC response recorded for a call, and
	// any one SSE event the wrapper looks at. A call whose response is
	// larger still streams to the client in full, but completes its key as
	// unreplayable: a retry is not run again and is answered with
	// [CodeUnreplayable]. Zero means [DefaultMaxRecordBytes]; negative
	// panics.
	MaxRecordBytes int
	// Principal returns the authenticated principal of a request (a user
	// or tenant id), typically from the context the server's auth
	// middleware filled. Non-empty, it alone is the caller's identity in
	// the scope of every key; empty, or a nil Principal, means the
	// credentials: the Authorization and X-Api-Key headers and the
	// SessionCookies. Callers with none of these share one identity. The
	// identity is hashed, never stored. With credentials as the identity,
	// a retry sent with a refreshed token is a new call and runs again: a
	// nil Principal without ScopeByCredentials logs a warning at the first
	// call that carries credentials (to Engine.Logger, or [slog.Default] if nil).
	Principal func(*http.Request) string
	// ScopeByCredentials declares that the credentials themselves are the
	// caller's identity (long-lived API keys that every retry repeats) and
	// silences the warning of a nil Principal. False means that warning.
	ScopeByCredentials bool
	// SessionCookies names the cookies whose values identify a caller.
	// Nil means not configured: a call that carries a Cookie header but
	// no principal and no credential is refused ([CodeInternalError],
	// [ReasonUnscopedCookies]) and not run. An empty, non-nil slice
	// declares that no cookie identifies a caller: cookies are ignored. A
	// name that is not a cookie name panics.
	SessionCookies []string
	// ScopeSecret keys the hash of the scope (HMAC-SHA-256), so that
	// credentials cannot be recovered from the table by hashing guesses.
	// Nil means plain SHA-256, and a warning at the first call that
	// carries credentials. See middleware.Options.ScopeSecret.
	ScopeSecret []byte
	// Observer is called on each [idem.Event] of a deduplicated call, for
	// metrics. It runs on the request's goroutine (or the lease
	// renewal's) and must be fast and safe for concurrent use. Nil means
	// none.
	Observer func(r *http.Request, e idem.Event)
	// Stateless says the inner handler keeps no sessions (go-sdk's
	// StreamableHTTPOptions.Stateless), so an Mcp-Session-Id header is
	// whatever the client chose: a call without a key is then never keyed
	// by session and request id, at any protocol version, and passes
	// through. False keys such calls by session before protocol 2026-07-28,
	// which is right for a stateful server: it refuses a session it did not
	// issue before the wrapper answers anything. On a stateless server it
	// would let two clients who send the same session id and request id
	// share a result.
	Stateless bool
	// NewKeyGuard, when set, notices the same caller making the same call
	// again under a new idempotency key (an agent that mints one per
	// retry), reports it and handles it as its Action says: see
	// [NewKeyGuard] for the trade-off. Nil means no guard.
	NewKeyGuard *NewKeyGuard
	// InTransactionTools reports the tools whose side effects are rows in the
	// store's database. A call of one is claimed inside a transaction of
	// that database, which the tool writes in (through [TxContext]); its
	// response is recorded in the same transaction, and the claim, the
	// rows and the response commit in one commit, or not at all, as
	// package middleware's Options.InTransaction does for HTTP. The
	// response is held back until the commit; a response that outgrows
	// MaxRecordBytes commits the call as unreplayable at that point and
	// streams on. Nil means none: every call is claimed on its own before
	// its tool runs, as a tool whose side effects are elsewhere (an HTTP
	// call) must be. Non-nil with a store that is not an [idem.TxStore]
	// panics.
	InTransactionTools func(tool string) bool
}

// scoping is o's settings of the default scope, which package middleware
// declares too.
func (o Options) scoping() adapter.Scoping {
	return adapter.Scoping{Principal: o.Principal, SessionCookies: o.SessionCookies, ScopeSecret: o.ScopeSecret, ScopeByCredentials: o.ScopeByCredentials}
}

// validate panics, naming the field, on the first of o's own fields that
// is wrong; [engine.Options.ForAdapter] checks Options.Engine.
func (o Options) validate() {
	adapter.Positive("mcphttp", "MaxBodyBytes", o.MaxBodyBytes, 0)
	adapter.Positive("mcphttp", "MaxRecordBytes", o.MaxRecordBytes, 0)
	if o.NewKeyGuard != nil {
		if err := o.NewKeyGuard.validate(); err != nil {
			panic(err.Error())
		}
	}
	for _, m := range o.Methods {
		if m == "" || m == "initialize" {
			panic(fmt.Sprintf("mcphttp: Options.Methods holds %q, which cannot be deduplicated", m))
		}
	}
}
