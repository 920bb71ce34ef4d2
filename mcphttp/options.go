package mcphttp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/adapter"
)

// Defaults of [Options].
const (
	// DefaultWait is how long a duplicate waits for the original's result
	// when Options.Wait is zero.
	DefaultWait = 30 * time.Second
	// DefaultMaxInspectBytes is the largest POST body read when
	// Options.MaxInspectBytes is zero: go-sdk's default request body limit.
	DefaultMaxInspectBytes = 4 << 20
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
	// Wait is how long a duplicate of a call still in flight waits for the
	// original's result before it is answered with [CodeInFlight], and how
	// long a session's DELETE waits for the calls running on the session
	// to answer (see "Closed sessions" in the package documentation). Zero
	// means [DefaultWait], 30 s: longer than package middleware's, because
	// an agent told a call is in flight often hands the error to its model
	// rather than retrying, and MCP clients wait a minute for an answer
	// anyway (see docs/design.md, "Why the adapters wait for different
	// times"). Negative means no wait.
	Wait time.Duration
	// Lease is the lease of a call's claim, renewed every third of it while
	// the inner handler runs, so a slow tool keeps its claim and a crashed
	// process's claim runs out. If no renewal is confirmed in time, the
	// call is cut off shortly before the lease ends (see the engine
	// package); a call cut off has a lease more to answer before its
	// inner request's context ends too (see "Cut off" in the package
	// documentation). Zero means [idem.DefaultLease]; negative or less
	// than a millisecond panics.
	Lease time.Duration
	// StoreTimeout bounds each store call made once a call runs (renew,
	// complete, release), which must not hang on a store outage; a
	// renewal is bounded further by the time left on the lease, and a
	// completion that fails with an unavailable store is tried again until
	// it runs out. Zero
	// means [engine.DefaultStoreTimeout]; negative panics.
	StoreTimeout time.Duration
	// MaxExecution bounds how long a deduplicated call runs under its
	// claim. When it has passed, or the request's own deadline has (one
	// set by http.TimeoutHandler or an outer middleware), the call's
	// context ends with cause [engine.ErrExecutionTimeout], the tool is
	// told as for a lost lease (see "Cut off" in the package
	// documentation), and the claim's lease is no longer renewed: a call
	// that answers a JSON-RPC error or a tool error (isError, what go-sdk
	// makes of a tool that returns its context's error) has its key
	// released; a tool result is recorded (the tool finished); a call that
	// does not answer keeps the key only until the lease runs out, and a
	// retry then runs. The deadline itself never completes the key. Zero
	// means [engine.DefaultMaxExecution]; negative means no bound but the
	// request's own deadline.
	MaxExecution time.Duration
	// IdleInTransaction bounds, for a call of a tool in InTransaction, how
	// long the call's transaction may stay idle between two statements of
	// the tool before PostgreSQL ends it
	// (idle_in_transaction_session_timeout): how the key of a process that
	// froze or lost its network with its transaction open is freed. A
	// tool that pauses longer loses its transaction: nothing commits, and
	// the client gets [CodeInternalError] with data.reason
	// [ReasonTransactionLimit], naming this setting. Zero means
	// MaxExecution (or [engine.DefaultMaxExecution] if that is negative).
	// The lease plays no part here. Shorter than both
	// [engine.MinIdleInTransaction] and MaxExecution, New logs a warning;
	// negative panics.
	IdleInTransaction time.Duration
	// Shutdown, when done, cuts off every call the wrapper runs (cause
	// [engine.ErrShutdown], see "Cut off" in the package documentation):
	// its tool is told to stop, and the call is recorded if the wrapper
	// still sees a whole response it records (a tool result without
	// isError: the tool finished), left to its lease if it sees none, and
	// released otherwise. Calls run on a context detached from the
	// client's, so closing the HTTP server does not end them: cancel
	// Shutdown when a graceful shutdown gives up. Nil means never.
	Shutdown context.Context
	// MaxInspectBytes bounds how much of a POST body the wrapper reads to
	// decide whether it is a call to dedupe. A longer body passes through
	// to the inner handler intact and is not deduplicated. Zero means
	// [DefaultMaxInspectBytes]; negative panics.
	MaxInspectBytes int64
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
	// identity is hashed, never stored.
	Principal func(*http.Request) string
	// SessionCookies names the cookies whose values identify a caller.
	// Nil means not configured: a call that carries a Cookie header but
	// no principal and no credential is refused ([CodeInternalError],
	// [ReasonUnscopedCookies]) and not run. An empty, non-nil slice
	// declares that no cookie identifies a caller: cookies are ignored. A
	// name that is not a cookie name panics.
	SessionCookies []string
	// ScopeSecret keys the hash of the scope (HMAC-SHA-256), so that
	// credentials cannot be recovered from the table by hashing guesses.
	// Nil means plain SHA-256. See middleware.Options.ScopeSecret.
	ScopeSecret []byte
	// Owner names this process in claims, for operators. Optional.
	Owner string
	// Logger receives store failures and lost claims, with keys as
	// digests ([idem.KeyDigest]), never in clear. Nil discards.
	Logger *slog.Logger
	// Observer is called on each [idem.Event] of a deduplicated call, for
	// metrics. It runs on the request's goroutine (or the lease
	// renewal's) and must be fast and safe for concurrent use. Nil means
	// none.
	Observer func(r *http.Request, e idem.Event)
	// CancelWithClient makes a deduplicated call's tool end when its
	// client goes away (the HTTP request's context ends), as MCP
	// 2026-07-28 says a closed response stream is cancellation. False (the
	// default) runs a keyed call to completion and records it, so the
	// client's retry gets that result and the tool runs once: see
	// "Cancellation" in the package documentation for why, and for when
	// true is safe. With true, a call cut off that way is recorded if the
	// wrapper saw its whole response and that response is one it records
	// (a tool result: not a JSON-RPC error, nor a tool error with isError,
	// which is what go-sdk makes of a tool that returns its cancelled
	// context's error); otherwise its key is released, so the retry runs
	// the tool again. Calls the wrapper does not deduplicate behave as the
	// inner handler makes them either way.
	CancelWithClient bool
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
	// InTransaction reports the tools whose side effects are rows in the
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
	InTransaction func(tool string) bool
}

// common is o's options that package middleware declares too, for the
// defaults and validation both adapters share.
func (o Options) common() adapter.Common {
	return adapter.Common{
		Lease: o.Lease, Wait: o.Wait, StoreTimeout: o.StoreTimeout,
		MaxExecution: o.MaxExecution, IdleInTransaction: o.IdleInTransaction,
		Shutdown: o.Shutdown, CancelWithClient: o.CancelWithClient,
		Owner: o.Owner, Logger: o.Logger,
		Principal: o.Principal, SessionCookies: o.SessionCookies, ScopeSecret: o.ScopeSecret,
	}
}

// validate panics, naming the field, on the first of o's own fields that
// is wrong; [adapter.Common.Engine] checks the common ones.
func (o Options) validate() {
	adapter.Positive("mcphttp", "MaxInspectBytes", o.MaxInspectBytes, 0)
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
