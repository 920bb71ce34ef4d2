package mcphttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
)

// Defaults of [Options].
const (
	DefaultWait            = 30 * time.Second
	DefaultMaxInspectBytes = 4 << 20 // go-sdk's default request body limit
	DefaultMaxRecordBytes  = 1 << 20
)

// Options configures the wrapper. The zero value is ready to use.
type Options struct {
	// Methods lists the JSON-RPC methods deduplicated. Nil means
	// tools/call only. Methods without side effects (tools/list,
	// resources/read, ...) gain nothing from it.
	Methods []string
	// Wait is how long a duplicate of a call still in flight waits for the
	// original's result before it is answered with [CodeInFlight]. Zero
	// means [DefaultWait]; negative means no wait.
	Wait time.Duration
	// Lease is the lease of a call's claim, renewed every third of it while
	// the inner handler runs, so a slow tool keeps its claim and a crashed
	// process's claim runs out. If no renewal is confirmed in time, the
	// inner handler's context ends shortly before the lease does (see the
	// engine package). Zero means [idem.DefaultLease]; negative or less
	// than a millisecond panics.
	Lease time.Duration
	// StoreTimeout bounds each store call made once a call runs (renew,
	// complete, release), which must not hang on a store outage; a
	// renewal is bounded further by the time left on the lease. Zero
	// means [engine.DefaultStoreTimeout]; negative panics.
	StoreTimeout time.Duration
	// Shutdown, when done, ends the context of every call the wrapper
	// runs with cause [engine.ErrShutdown]; a call so cut off is not
	// recorded and its key is released. Calls run on a context detached
	// from the client's, so closing the HTTP server does not end them:
	// cancel Shutdown when a graceful shutdown gives up. Nil means never.
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
}

type wrapper struct {
	next       http.Handler
	eng        *engine.Engine
	store      idem.Store
	methods    map[string]bool
	wait       time.Duration
	lease      time.Duration
	maxInspect int64
	maxRecord  int
	scope      *scoper
	owner      string
	log        *slog.Logger
	observer   func(*http.Request, idem.Event)
}

// New returns middleware that deduplicates MCP calls (by default
// tools/call) on the Streamable HTTP transport in front of any MCP handler,
// with store as the source of truth. See the package documentation for
// what it does and why. It panics if store is nil or opts is invalid.
func New(store idem.Store, opts Options) func(http.Handler) http.Handler {
	if store == nil {
		panic("mcphttp: nil store")
	}
	if opts.Lease < 0 || opts.StoreTimeout < 0 || opts.MaxInspectBytes < 0 || opts.MaxRecordBytes < 0 {
		panic("mcphttp: negative Lease, StoreTimeout, MaxInspectBytes or MaxRecordBytes")
	}
	methods := map[string]bool{}
	if opts.Methods == nil {
		methods["tools/call"] = true
	}
	for _, m := range opts.Methods {
		if m == "" || m == "initialize" {
			panic(fmt.Sprintf("mcphttp: method %q cannot be deduplicated", m))
		}
		methods[m] = true
	}
	switch {
	case opts.Wait == 0:
		opts.Wait = DefaultWait
	case opts.Wait < 0:
		opts.Wait = 0
	}
	if opts.Lease == 0 {
		opts.Lease = idem.DefaultLease
	}
	if opts.MaxInspectBytes == 0 {
		opts.MaxInspectBytes = DefaultMaxInspectBytes
	}
	if opts.MaxRecordBytes == 0 {
		opts.MaxRecordBytes = DefaultMaxRecordBytes
	}
	scope := newScoper(opts)
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	eng := engine.New(store, engine.Options{
		Adapter:      idem.AdapterMCP,
		Lease:        opts.Lease,
		Wait:         opts.Wait,
		StoreTimeout: opts.StoreTimeout,
		Shutdown:     opts.Shutdown,
		Owner:        opts.Owner,
		Logger:       logger,
	})
	return func(next http.Handler) http.Handler {
		return &wrapper{
			next: next, eng: eng, store: store, methods: methods, wait: opts.Wait, lease: opts.Lease,
			maxInspect: opts.MaxInspectBytes, maxRecord: opts.MaxRecordBytes,
			scope: scope, owner: opts.Owner, log: logger, observer: opts.Observer,
		}
	}
}

func (m *wrapper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(DerivedKeyHeader) != "" {
		r = r.Clone(r.Context())
		r.Header.Del(DerivedKeyHeader)
	}
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
		m.next.ServeHTTP(w, r)
		return
	}
	body, whole, err := readPrefix(r.Body, m.maxInspect)
	// Give the inner handler the body exactly as it came, read or not.
	r.Body = &rereadBody{Reader: io.MultiReader(bytes.NewReader(body), r.Body), Closer: r.Body}
	if err != nil || !whole {
		m.next.ServeHTTP(w, r)
		return
	}
	c, ok := parseCall(body, m.methods)
	if !ok || !m.headersAgree(r, c) {
		m.next.ServeHTTP(w, r)
		return
	}
	if !supportedID(c.id) {
		b := errorResponse(c.rawID, rpcError{
			Code:    CodeInvalidRequest,
			Message: "a deduplicated call's id must be a string or an integer within int64",
			Data:    errorData{Reason: ReasonUnsupportedID},
		})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(b)
		return
	}
	m.serveCall(w, r, c)
}

// headersAgree reports whether the optional Mcp-Method and Mcp-Name headers
// (newer protocol revisions) name the body's method and tool. When they do
// not, the inner handler rejects the request, and the wrapper leaves that to
// it rather than answer from the store.
func (m *wrapper) headersAgree(r *http.Request, c call) bool {
	if v := r.Header.Get("Mcp-Method"); v != "" && v != c.method {
		return false
	}
	if v := r.Header.Get("Mcp-Name"); v != "" && v != c.name {
		return false
	}
	return true
}

// identify returns the claim for a call, the key forwarded upstream, and
// whether the call can be deduplicated at all; keyErr is an invalid key or a
// caller the scope cannot name (see [scoper]).
func (m *wrapper) identify(r *http.Request, c call) (req idem.ClaimRequest, forward string, ok bool, keyErr error) {
	scope, scopeErr := m.scope.scope(r, c.sessionID)
	req = idem.ClaimRequest{Scope: scope, Fingerprint: c.digest, Lease: m.lease, Owner: m.owner}
	if c.hasKey {
		if scopeErr != nil {
			return req, "", true, scopeErr
		}
		k, err := idem.ParseKey(c.idemKey)
		if err != nil {
			return req, "", true, err
		}
		req.Key = k
		return req, c.idemKey, true, nil
	}
	session := r.Header.Get("Mcp-Session-Id")
	if session == "" {
		// Request ids are unique per session only: without one, two
		// clients' id 1 would be one key, and one would be answered with
		// the other's result.
		return req, "", false, nil
	}
	if scopeErr != nil {
		return req, "", true, scopeErr
	}
	// The argument digest joins the tool name in the key's target, not
	// only the fingerprint: under a reused id, a call with other arguments
	// is a fresh call (seed 000), where a fingerprint alone would make the
	// store answer it with a mismatch.
	req.Key = idem.KeyForMethodCall(idem.SessionID(session), c.id, c.method, c.name+"/"+c.digest)
	f := sha256.Sum256([]byte(scope + "\x00" + req.Key.String()))
	return req, hex.EncodeToString(f[:]), true, nil
}

func (m *wrapper) serveCall(w http.ResponseWriter, r *http.Request, c call) {
	req, forward, ok, keyErr := m.identify(r, c)
	if !ok {
		m.next.ServeHTTP(w, r)
		return
	}
	if keyErr != nil {
		m.answer(w, r, c, m.refusal(r, c, keyErr), false)
		return
	}
	ctx := r.Context()
	ereq := &engine.Request{Claim: req}
	if m.observer != nil {
		ereq.Observe = func(e idem.Event) { m.observer(r, e) }
	}
	d := m.eng.TryClaim(ctx, ereq)
	switch d.Outcome {
	case engine.Run:
		m.execute(w, r, c, ereq, d, forward)
		return
	case engine.Gone:
		return
	}
	// Anything but a fresh claim is answered by the wrapper, and only after
	// the inner handler has accepted the request: see "Order of checks".
	probe, accepted := m.probe(r, c)
	if !accepted {
		probe.writeTo(w)
		return
	}
	if d.Outcome == engine.InFlight && m.wait > 0 {
		switch d = m.eng.Claim(ctx, ereq); d.Outcome {
		case engine.Run:
			m.execute(w, r, c, ereq, d, forward)
			return
		case engine.Gone:
			return // the client went away while it waited
		}
	} else {
		m.eng.Report(ctx, ereq, d)
	}
	m.answer(w, r, c, m.replayBody(c, req, d), true, probe)
}

// replayBody is the JSON-RPC response the wrapper answers a call with when
// it does not run it.
func (m *wrapper) replayBody(c call, req idem.ClaimRequest, d engine.Decision) []byte {
	switch d.Outcome {
	case engine.Mismatch:
		return errorResponse(c.rawID, rpcError{
			Code:    CodeKeyReused,
			Message: "_meta.idempotencyKey was already used for a different call (another tool or other arguments)",
			Data:    errorData{Reason: ReasonKeyReused},
		})
	case engine.InvalidKey:
		return errorResponse(c.rawID, rpcError{
			Code: CodeInvalidParams, Message: "the idempotency store rejected the call's key: " + d.Err.Error(),
			Data: errorData{Reason: ReasonInvalidKey},
		})
	case engine.Unavailable:
		msg := "idempotency store unavailable; the call was not run, retry it"
		if errors.Is(d.Err, idem.ErrCapacity) {
			msg = "idempotency store full; the call was not run, retry it later"
		}
		return errorResponse(c.rawID, rpcError{
			Code: CodeUnavailable, Message: msg,
			Data: errorData{Reason: ReasonUnavailable, RetryAfterMs: d.RetryAfter.Milliseconds()},
		})
	case engine.Replay:
		if d.Claim.Result.Unreplayable {
			return errorResponse(c.rawID, rpcError{
				Code:    CodeUnreplayable,
				Message: "this call already ran, but its response was too large to record and cannot be replayed",
				Data:    errorData{Reason: ReasonUnreplayable},
			})
		}
		body, err := withID(d.Claim.Result.Body, c.rawID)
		if err == nil {
			return body
		}
		m.log.Error("mcphttp: recorded response unreadable", "key_digest", idem.KeyDigest(req.Scope, req.Key), "err", err)
		return errorResponse(c.rawID, rpcError{
			Code:    CodeUnreplayable,
			Message: "this call already ran, but its recorded response cannot be replayed",
			Data:    errorData{Reason: ReasonUnreplayable},
		})
	default: // still in flight after the wait
		return errorResponse(c.rawID, rpcError{
			Code:    CodeInFlight,
			Message: "the same call is still running; retry it with the same id or _meta.idempotencyKey to get its result",
			Data:    errorData{Reason: ReasonInFlight, RetryAfterMs: d.RetryAfter.Milliseconds()},
		})
	}
}

// answer writes a JSON-RPC response the wrapper made itself, framed as the
// inner handler frames its answers (an SSE event or a JSON body, with its
// status and headers). Without a probe yet, it probes first.
func (m *wrapper) answer(w http.ResponseWriter, r *http.Request, c call, body []byte, replay bool, probes ...*capture) {
	var probe *capture
	if len(probes) > 0 {
		probe = probes[0]
	} else {
		var accepted bool
		if probe, accepted = m.probe(r, c); !accepted {
			probe.writeTo(w)
			return
		}
	}
	h := w.Header()
	for k, vs := range probe.header {
		if k == "Content-Length" {
			continue
		}
		h[k] = append([]string(nil), vs...)
	}
	if replay {
		h.Set("Idempotent-Replayed", "true")
	}
	if isSSE(probe.header.Get("Content-Type")) {
		w.WriteHeader(probe.status)
		var b bytes.Buffer
		b.WriteString("event: message\ndata: ")
		b.Write(body)
		b.WriteString("\n\n")
		_, _ = w.Write(b.Bytes())
		return
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(probe.status)
	_, _ = w.Write(body)
}

func isSSE(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream"
}

// probe asks the inner handler whether it accepts the request, without
// running the call: it sends the same HTTP request (method, URL, headers,
// session, credentials, context) with the body replaced by a ping under the
// same id and _meta. Ping is the one request every MCP server must answer
// and has no effect, so the inner handler's answer is its verdict on
// everything but the call itself: Host and Origin checks, authentication,
// Content-Type and Accept, the protocol version, the session, and a
// duplicate of an id still in flight. accepted reports a JSON-RPC result to
// the ping; otherwise the captured answer is the inner handler's rejection,
// for the client as is.
func (m *wrapper) probe(r *http.Request, c call) (*capture, bool) {
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(c.rawID)
	b.WriteString(`,"method":"ping"`)
	if c.meta != nil {
		b.WriteString(`,"params":{"_meta":`)
		b.Write(c.meta)
		b.WriteByte('}')
	}
	b.WriteByte('}')
	pr := sibling(r.Context(), r, b.Bytes(), "ping")
	capt := newCapture(m.maxRecord)
	m.next.ServeHTTP(capt, pr)
	if capt.status == 0 {
		capt.status = http.StatusOK
	}
	if capt.status != http.StatusOK {
		return capt, false
	}
	s := newScanner(c.id, m.maxRecord, capt.header.Get("Content-Type"))
	s.write(capt.body.Bytes())
	if s.sse {
		s.write([]byte("\n\n")) // dispatch a last event left unterminated
	}
	s.finish()
	return capt, s.final != nil && !s.finalError
}

func (c *capture) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range c.header {
		h[k] = append([]string(nil), vs...)
	}
	w.WriteHeader(c.status)
	_, _ = w.Write(c.body.Bytes())
}

// execute runs the call through the inner handler under the claim d
// acquired, streaming its answer to the client while recording the call's
// response; the engine completes, releases or leaves the claim as the
// recorder reads the answer.
func (m *wrapper) execute(w http.ResponseWriter, r *http.Request, c call, req *engine.Request, d engine.Decision, forward string) {
	x := m.eng.Start(r.Context(), req, d)
	// The inner handler runs on the engine's context, which outlives the
	// client: a client that drops its connection after sending the call
	// is exactly the one that will retry it, and its retry must find the
	// response recorded, not a second execution.
	ctx := NewContext(x.Context(), Meta{
		SessionID: c.sessionID, IdempotencyKey: forward,
		Authorization: r.Header.Get("Authorization"), APIKey: r.Header.Get(APIKeyHeader),
	})
	ir := r.Clone(ctx)
	if !c.hasKey && forward != "" {
		ir.Header.Set(DerivedKeyHeader, forward)
	}
	rec := &recorder{w: w, id: c.id, limit: m.maxRecord}
	x.Do(func(context.Context) engine.Verdict {
		stop := m.cancelOnEngineStop(x.Context(), r, c)
		defer stop()
		m.next.ServeHTTP(rec, ir)
		return rec.verdict()
	}, rec.verdict)
}

// readPrefix reads up to limit bytes of body. whole reports that body ended
// within them.
func readPrefix(body io.Reader, limit int64) (prefix []byte, whole bool, err error) {
	prefix, err = io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return prefix, false, err
	}
	if int64(len(prefix)) > limit {
		return prefix, false, nil
	}
	return prefix, true, nil
}

// rereadBody re-provides a request body the wrapper read part of.
type rereadBody struct {
	io.Reader
	io.Closer
}
