package middleware

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"time"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/adapter"
)

// Defaults applied by [New] to zero [Options] fields.
const (
	// DefaultMaxBodyBytes is the largest request body read when
	// Options.MaxBodyBytes is zero: 1 MiB.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxRecordBytes is the largest response body recorded for replay
	// when Options.MaxRecordBytes is zero: 1 MiB.
	DefaultMaxRecordBytes = 1 << 20
	// DefaultWait is how long a duplicate of an in-flight request waits for
	// the original's result when Options.Engine.Wait is zero.
	DefaultWait = 5 * time.Second
)

// DefaultMethods are the methods protected when Options.Methods is nil: the
// ones that are neither safe nor idempotent by definition (RFC 9110 §9.2).
var DefaultMethods = []string{http.MethodPost, http.MethodPatch}

// DefaultRecordHeaders are the response headers recorded and replayed when
// Options.RecordHeaders is nil: the ones that describe the representation
// or point at the created resource.
var DefaultRecordHeaders = []string{
	"Cache-Control",
	"Content-Encoding",
	"Content-Language",
	"Content-Location",
	"Content-Type",
	"Etag",
	"Expires",
	"Last-Modified",
	"Link",
	"Location",
	"Vary",
}

// neverRecorded are headers no configuration may record: credentials and
// session state that belong to the original client's exchange, hop-by-hop
// headers (RFC 9110 §7.6.1) that describe one connection, and headers net/http
// or the middleware computes for each response.
var neverRecorded = map[string]bool{
	"Set-Cookie":          true,
	"Set-Cookie2":         true,
	"Authorization":       true,
	"Proxy-Authorization": true,
	"Proxy-Authenticate":  true,
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Connection":    true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
	"Content-Length":      true,
	"Date":                true,
	ReplayedHeader:        true,
}

// ScopeFunc returns the scope of a request: who is asking. Keys never match
// across scopes. It must be deterministic for a client's retries.
type ScopeFunc func(r *http.Request) string

// FingerprintFunc returns the fingerprint of a request: what is being asked.
// body is the whole request body, already read; do not retain or modify it.
// A key reused with another fingerprint is answered 422. The empty string
// means "do not compare".
type FingerprintFunc func(r *http.Request, body []byte) string

// RecordPolicy reports whether a response with this status completes the key
// (it is recorded and replayed) or releases it (a retry runs the handler
// again).
type RecordPolicy func(status int) bool

// Options configures [New]. The zero value is usable: every field documents
// what its zero value means, and each default is an exported DefaultXxx.
// Invalid values make New panic, with a message naming the field: like
// net/http's constructors (http.ServeMux.Handle with a bad pattern), a
// middleware is misconfigured at construction, in code, never per request;
// the stores, configured at run time, return an error from New instead.
type Options struct {
	// Methods lists the protected methods; requests with other methods pass
	// through untouched. Nil means [DefaultMethods] (POST and PATCH). An
	// empty, non-nil slice panics.
	Methods []string

	// KeyOptional lets a protected request without a key (see Key)
	// through to the handler, unprotected, reported as an
	// [idem.EventUnprotected]. False means such a request is answered 400
	// ([TypeMissingKey]). True with InTransaction panics.
	KeyOptional bool

	// Key reads a request's idempotency key. Nil means [HeaderKey]: the
	// Idempotency-Key header (or X-Idempotency-Key). [WebhookKey] reads
	// the Standard Webhooks webhook-id header, for a webhook receiver;
	// [KeyFromHeader] another header.
	Key KeySource

	// Scope returns a request's scope, replacing the default one; it is
	// stored as returned (hash it if it holds anything secret). Nil means
	// the default: a keyed hash of the caller's identity (Principal, else
	// the Authorization and X-Api-Key headers and the SessionCookies), the
	// X-Session-Id header, the method and the route. Setting Scope together
	// with Principal, ScopeByCredentials, SessionCookies or ScopeSecret
	// panics.
	Scope ScopeFunc

	// Principal returns the authenticated principal of a request (a user
	// or tenant id), typically from the context the service's auth
	// middleware filled, which must therefore run before this middleware.
	// When it returns a non-empty string, the principal alone is the
	// caller's identity: a credential refreshed between a client's retries
	// still finds its key. Empty, or a nil Principal, means the identity
	// is the credentials, so a retry sent with a refreshed bearer token is
	// a new request and runs again; with a nil Principal and not
	// ScopeByCredentials, the first request that carries credentials logs
	// a warning that says so (to Engine.Logger, or [slog.Default] if nil).
	Principal func(r *http.Request) string

	// ScopeByCredentials declares that the credentials themselves are the
	// caller's identity (long-lived API keys that every retry repeats) and
	// silences the warning of a nil Principal. False means that warning.
	ScopeByCredentials bool

	// SessionCookies names the cookies whose values identify a user (the
	// session cookie of a browser application); their values join
	// Authorization and X-Api-Key as credentials. Nil means not
	// configured: a request that carries a Cookie header but no principal
	// and no credential is answered 500 ([TypeUnscopedCookies]) and its
	// handler does not run, because hashing only the headers would put
	// every cookie-authenticated user in one scope. An empty, non-nil
	// slice declares that no cookie identifies a user here: cookies are
	// ignored. A name that is not a cookie name panics.
	SessionCookies []string

	// ScopeSecret keys the hash of the default scope (HMAC-SHA-256), so
	// that credentials cannot be recovered from the table by hashing
	// guesses (a Basic password, a short API key). Use 32 random bytes,
	// the same in every instance, kept like any other secret; changing it
	// changes every scope, so a retry that straddles the change runs
	// again. Nil means plain SHA-256: fine for high-entropy credentials
	// (random bearer tokens, session ids), guessable for low-entropy ones
	// by anyone who can read the table; the first request that carries
	// credentials then logs a warning.
	ScopeSecret []byte

	// Fingerprint returns a request's fingerprint. Nil means
	// [DefaultFingerprint].
	Fingerprint FingerprintFunc

	// MaxBodyBytes is the largest request body read; a larger one is
	// answered 413 ([TypeBodyTooLarge]) and the handler does not run. Zero
	// means [DefaultMaxBodyBytes]. Negative panics.
	MaxBodyBytes int64

	// MaxRecordBytes is the largest response body recorded. A response
	// whose body is larger still reaches the client in full, but completes
	// the key as unreplayable: a retry does not run the handler and is
	// answered 410 ([TypeUnreplayable]). Zero means
	// [DefaultMaxRecordBytes]. Negative panics.
	MaxRecordBytes int

	// RecordHeaders lists the response headers recorded and replayed
	// (case-insensitive). Nil means [DefaultRecordHeaders]; an empty,
	// non-nil slice records none. Set-Cookie, Authorization, hop-by-hop
	// headers, Content-Length, Date and Idempotent-Replayed are never
	// recorded: listing one panics.
	RecordHeaders []string

	// RecordPolicy decides which statuses complete the key. Nil means
	// [DefaultRecordPolicy]: everything but 408, 429 and 5xx. With
	// InTransaction, a policy that does not record every status below 400
	// panics.
	RecordPolicy RecordPolicy

	// FailOpen runs the handler, unprotected and unrecorded, when the
	// store cannot be reached or is full. UNSAFE: during an outage every
	// retry runs the side effect again, which is what this middleware
	// exists to prevent. False means such requests are answered 503
	// ([TypeStoreUnavailable]) and the handler never runs without a claim.
	// True with InTransaction panics.
	FailOpen bool

	// Engine holds the settings of claims, leases and timeouts that both
	// adapters share: Lease, Wait, StoreTimeout, RetryAfter, MaxExecution,
	// IdleInTransaction, Shutdown, CancelWithClient, Owner and Logger, each
	// documented on [engine.Options]. Here the engine's work is the
	// handler, and a duplicate that waits longer than Wait is answered 409
	// ([TypeInFlight]); a zero Wait means [DefaultWait], 5 s (see
	// docs/design.md, "Why the adapters wait for different times"). The
	// zero value is usable.
	Engine engine.Options

	// Observer is called on each [idem.Event], for metrics. It runs on the
	// request's goroutine (or the lease renewal's) and must be fast and
	// safe for concurrent use. Nil means none.
	Observer Observer

	// InTransaction takes each claim inside a transaction of the store's
	// database, which the handler writes its side effects in (pgstore:
	// pgstore.TxFrom(r.Context())), and commits that transaction with the
	// recorded response: the claim, the handler's writes and the response
	// commit in one commit, or not at all (see "In a transaction" in the
	// package documentation). The response is held back until then. False
	// means the two-phase claim, for side effects outside the database:
	// the claim commits on its own before the handler runs, and the
	// response streams to the client as it is written. True panics with a
	// store that is not an [idem.TxStore], with FailOpen or KeyOptional,
	// and with a RecordPolicy that does not record every status below 400.
	InTransaction bool
}

// config is Options with the defaults applied and lookups precomputed.
type config struct {
	engine        engine.Options // Options.Engine, defaults applied
	methods       map[string]bool
	keyOptional   bool
	key           KeySource
	scope         ScopeFunc       // Options.Scope; nil means scoper's
	scoper        *adapter.Scoper // the default scope; nil with Options.Scope
	fingerprint   FingerprintFunc
	maxBody       int64
	maxRecord     int
	recordHeaders []string // canonical names
	recordPolicy  RecordPolicy
	failOpen      bool
	logger        *slog.Logger
	observer      Observer
	inTx          bool
}

func newConfig(o Options) *config {
	c := &config{
		engine:      o.Engine.ForAdapter(AdapterName, DefaultWait),
		keyOptional: o.KeyOptional,
		key:         o.Key,
		fingerprint: o.Fingerprint,
		failOpen:    o.FailOpen,
		observer:    o.Observer,
		inTx:        o.InTransaction,
	}
	c.logger = c.engine.Logger
	if o.Scope != nil {
		// The options that configure the default scope would be silently
		// ignored, and a secret believed in use would not be.
		if o.Principal != nil || o.SessionCookies != nil || len(o.ScopeSecret) > 0 || o.ScopeByCredentials {
			panic("middleware: Options.Scope replaces the default scope; Principal, ScopeByCredentials, SessionCookies and ScopeSecret configure the default and cannot be combined with it")
		}
		c.scope = o.Scope
	} else {
		c.scoper = adapter.NewScoper("middleware", adapter.Scoping{
			Principal: o.Principal, SessionCookies: o.SessionCookies, ScopeSecret: o.ScopeSecret, ScopeByCredentials: o.ScopeByCredentials,
		}, o.Engine.Logger)
	}
	methods := o.Methods
	if methods == nil {
		methods = DefaultMethods
	}
	if len(methods) == 0 {
		panic("middleware: Options.Methods is empty; use nil for the default, or do not mount the middleware")
	}
	c.methods = make(map[string]bool, len(methods))
	for _, m := range methods {
		if m == "" {
			panic("middleware: Options.Methods holds an empty method")
		}
		c.methods[m] = true
	}
	if c.key == nil {
		c.key = HeaderKey
	}
	if c.fingerprint == nil {
		c.fingerprint = DefaultFingerprint
	}
	c.maxBody = adapter.Positive("middleware", "MaxBodyBytes", o.MaxBodyBytes, DefaultMaxBodyBytes)
	c.maxRecord = adapter.Positive("middleware", "MaxRecordBytes", o.MaxRecordBytes, DefaultMaxRecordBytes)

	headers := o.RecordHeaders
	if headers == nil {
		headers = DefaultRecordHeaders
	}
	seen := make(map[string]bool, len(headers))
	for _, h := range headers {
		name := textproto.CanonicalMIMEHeaderKey(h)
		if name == "" {
			panic("middleware: Options.RecordHeaders holds an empty name")
		}
		if neverRecorded[name] {
			panic(fmt.Sprintf("middleware: Options.RecordHeaders lists %s, which is never recorded", name))
		}
		if !seen[name] {
			seen[name] = true
			c.recordHeaders = append(c.recordHeaders, name)
		}
	}

	c.recordPolicy = o.RecordPolicy
	if c.recordPolicy == nil {
		c.recordPolicy = DefaultRecordPolicy
	}
	if c.inTx {
		refuseWithTransaction(o, c.recordPolicy)
	}
	return c
}

// refuseWithTransaction panics on the options that cannot keep
// InTransaction's promise. FailOpen and KeyOptional would run the handler
// without a claim, so without the transaction it writes its rows in. A
// record policy that leaves out a success or a redirect would roll back
// the rows of an answer that tells its client it succeeded (what is not
// recorded rolls back), so every status below 400 must be recorded; the
// policy is asked once for each.
func refuseWithTransaction(o Options, policy RecordPolicy) {
	switch {
	case o.FailOpen:
		panic("middleware: Options.FailOpen cannot be combined with InTransaction: the handler would run without a claim, so without the transaction it writes in")
	case o.KeyOptional:
		panic("middleware: Options.KeyOptional cannot be combined with InTransaction: a request without a key would run without a claim, so without the transaction it writes in")
	}
	for status := 200; status < 400; status++ {
		if !policy(status) {
			panic(fmt.Sprintf("middleware: Options.RecordPolicy does not record %d, and with InTransaction an answer not recorded rolls back: a client answered %d would be told it succeeded while its rows are gone; record every status below 400", status, status))
		}
	}
}

// DefaultRecordPolicy completes the key for every status except 408 Request
// Timeout, 429 Too Many Requests and 5xx, which release it so that a retry
// runs the handler again: those answers say the request was not (or not
// fully) processed.
func DefaultRecordPolicy(status int) bool {
	return status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

// snapshot copies the recorded headers out of h. The copy is needed because
// a handler may change its header map after the response was sent. All
// values share one backing array.
func (c *config) snapshot(h http.Header) map[string][]string {
	names, values := 0, 0
	for _, name := range c.recordHeaders {
		if n := len(h[name]); n > 0 {
			names++
			values += n
		}
	}
	if names == 0 {
		return nil
	}
	out := make(map[string][]string, names)
	all := make([]string, 0, values)
	for _, name := range c.recordHeaders {
		if vs := h[name]; len(vs) > 0 {
			all = append(all, vs...)
			out[name] = all[len(all)-len(vs) : len(all) : len(all)]
		}
	}
	return out
}
