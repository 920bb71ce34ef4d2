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
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// Defaults of [Options].
const (
	DefaultWait            = 30 * time.Second
	DefaultMaxInspectBytes = 4 << 20 // go-sdk's default request body limit
	DefaultMaxRecordBytes  = 1 << 20
)

// storeTimeout bounds the store calls made after the inner handler returned
// (complete, release), which must not depend on the client still being
// there.
const storeTimeout = 10 * time.Second

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
	// process's claim runs out. Zero means [idem.DefaultLease]; negative
	// panics.
	Lease time.Duration
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
	// Principal returns who is calling, for the scope of every key. Nil
	// means the credentials: the Authorization and X-Api-Key headers
	// (anonymous callers share one principal). The value is hashed, never
	// stored.
	Principal func(*http.Request) string
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
	// true is safe. With true, a call cut off that way records nothing and
	// releases its key, so the retry runs the tool again. Calls the wrapper
	// does not deduplicate behave as the inner handler makes them either
	// way.
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
}

type wrapper struct {
	next       http.Handler
	store      idem.Store
	methods    map[string]bool
	wait       time.Duration
	lease      time.Duration
	maxInspect int64
	maxRecord  int
	principal  func(*http.Request) string
	owner      string
	log        *slog.Logger
	observer   func(*http.Request, idem.Event)
	// cancelWithClient is Options.CancelWithClient.
	cancelWithClient bool
	// stateless is Options.Stateless.
	stateless bool
}

// New returns middleware that deduplicates MCP calls (by default
// tools/call) on the Streamable HTTP transport in front of any MCP handler,
// with store as the source of truth. See the package documentation for
// what it does and why. It panics if store is nil or opts is invalid.
func New(store idem.Store, opts Options) func(http.Handler) http.Handler {
	if store == nil {
		panic("mcphttp: nil store")
	}
	if opts.Lease < 0 || opts.MaxInspectBytes < 0 || opts.MaxRecordBytes < 0 {
		panic("mcphttp: negative Lease, MaxInspectBytes or MaxRecordBytes")
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
	if opts.Principal == nil {
		opts.Principal = credentials
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return func(next http.Handler) http.Handler {
		return &wrapper{
			next: next, store: store, methods: methods, wait: opts.Wait, lease: opts.Lease,
			maxInspect: opts.MaxInspectBytes, maxRecord: opts.MaxRecordBytes,
			principal: opts.Principal, owner: opts.Owner, log: logger, observer: opts.Observer,
			cancelWithClient: opts.CancelWithClient, stateless: opts.Stateless,
		}
	}
}

func credentials(r *http.Request) string {
	return r.Header.Get("Authorization") + "\x00" + r.Header.Get("X-Api-Key")
}

func (m *wrapper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(DerivedKeyHeader) != "" {
		r = r.Clone(r.Context())
		r.Header.Del(DerivedKeyHeader)
	}
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody || m.routedAround(r) {
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
	if modern(r, c) && !standardHeadersPresent(r, c) {
		return false
	}
	if v := r.Header.Get("Mcp-Method"); v != "" && v != c.method {
		return false
	}
	if v := r.Header.Get("Mcp-Name"); v != "" && v != c.name {
		return false
	}
	return true
}

// identify returns the claim for a call, the key forwarded upstream and
// where the call's key came from (empty for a derived one), and whether the
// call can be deduplicated at all.
func (m *wrapper) identify(r *http.Request, c call) (req idem.ClaimRequest, forward, source string, ok bool, keyErr error) {
	h := sha256.Sum256([]byte(m.principal(r)))
	scope := "mcp:" + hex.EncodeToString(h[:16])
	if c.sessionID != "" {
		s := sha256.Sum256([]byte(c.sessionID))
		scope += ":" + hex.EncodeToString(s[:16])
	}
	req = idem.ClaimRequest{Scope: scope, Fingerprint: c.digest, Lease: m.lease, Owner: m.owner}
	key, source, present, err := callKey(r, c)
	if present {
		if err == nil {
			// Each round of a multi round-trip call is its own claim: see
			// rounds.go.
			if c.round == "" {
				req.Key, err = idem.ParseKey(key)
			} else {
				req.Key, err = idem.ParseRoundKey(key, c.round)
			}
		}
		return req, key, source, true, err
	}
	session := r.Header.Get("Mcp-Session-Id")
	if session == "" || m.stateless || modern(r, c) {
		// Request ids are unique per session only: without one, two
		// clients' id 1 would be one key, and one would be answered with
		// the other's result. From ModernProtocol on there are no sessions
		// (a server ignores the header, so any client can send any value)
		// and a retry has a new id anyway.
		return req, "", "", false, nil
	}
	// The argument digest joins the tool name in the key's target, not
	// only the fingerprint: under a reused id, a call with other arguments
	// is a fresh call (seed 000), where a fingerprint alone would make the
	// store answer it with a mismatch.
	target := c.name + "/" + c.digest
	if c.round != "" {
		target += "/" + c.round
	}
	req.Key = idem.KeyForMethodCall(idem.SessionID(session), c.id, c.method, target)
	f := sha256.Sum256([]byte(scope + "\x00" + req.Key.String()))
	return req, hex.EncodeToString(f[:]), "", true, nil
}

func (m *wrapper) serveCall(w http.ResponseWriter, r *http.Request, c call) {
	req, forward, source, ok, keyErr := m.identify(r, c)
	if !ok {
		m.next.ServeHTTP(w, r)
		return
	}
	if keyErr != nil {
		m.answer(w, r, c, invalidKeyResponse(c, source, keyErr), false)
		return
	}
	ctx := r.Context()
	start := time.Now()
	claim, err := m.store.Claim(ctx, req)
	if err == nil && claim.Status == idem.Acquired {
		m.observe(r, idem.Event{Kind: idem.EventClaimed, Scope: req.Scope, Key: req.Key, Duration: time.Since(start)})
		m.execute(w, r, c, claim.Token, forward, source)
		return
	}
	// Anything but a fresh claim is answered by the wrapper, and only after
	// the inner handler has accepted the request: see "Order of checks".
	probe, accepted := m.probe(r, c)
	if !accepted {
		probe.writeTo(w)
		return
	}
	if err == nil && claim.Status == idem.InFlight && m.wait > 0 {
		claim, err = idem.ClaimWait(ctx, m.store, req, m.wait)
		if ctx.Err() != nil {
			return // the client went away while it waited
		}
		if err == nil && claim.Status == idem.Acquired {
			m.observe(r, idem.Event{Kind: idem.EventClaimed, Scope: req.Scope, Key: req.Key, Duration: time.Since(start)})
			m.execute(w, r, c, claim.Token, forward, source)
			return
		}
	}
	e := idem.Event{Kind: answerKind(claim, err), Scope: req.Scope, Key: req.Key, Duration: time.Since(start)}
	if e.Kind == idem.EventStoreError {
		e.Op, e.Err = "claim", err
	}
	m.observe(r, e)
	body, replayed := m.replayBody(c, req, claim, err)
	m.answer(w, r, c, body, replayed, probe)
}

// answerKind is the event of a call the wrapper answers without running it.
func answerKind(claim idem.Claim, err error) idem.EventKind {
	var mismatch *idem.MismatchError
	switch {
	case errors.As(err, &mismatch):
		return idem.EventMismatch
	case err != nil:
		return idem.EventStoreError
	case claim.Status == idem.Completed:
		return idem.EventReplayed
	}
	return idem.EventInFlight
}

func (m *wrapper) observe(r *http.Request, e idem.Event) {
	if m.observer != nil {
		m.observer(r, e)
	}
}

// replayBody is the JSON-RPC response the wrapper answers a call with when
// it does not run it. replayed reports that it is the recorded response;
// the wrapper's own errors are not replays and never say they are.
func (m *wrapper) replayBody(c call, req idem.ClaimRequest, claim idem.Claim, err error) (body []byte, replayed bool) {
	var mismatch *idem.MismatchError
	switch {
	case errors.As(err, &mismatch):
		return wrapperError(c.rawID, rpcError{
			Code:    CodeKeyReused,
			Message: "_meta.idempotencyKey was already used for a different call (another tool or other arguments)",
			Data:    errorData{Reason: ReasonKeyReused},
		})
	case err != nil:
		m.log.Warn("mcphttp: claim failed", "key_digest", idem.KeyDigest(req.Scope, req.Key), "err", err)
		retry := time.Second
		var ue *idem.UnavailableError
		if errors.As(err, &ue) && ue.RetryAfter > 0 {
			retry = ue.RetryAfter
		}
		return wrapperError(c.rawID, rpcError{
			Code: CodeUnavailable, Message: "idempotency store unavailable; the call was not run, retry it",
			Data: errorData{Reason: ReasonUnavailable, RetryAfterMs: retry.Milliseconds()},
		})
	case claim.Status == idem.Completed && claim.Result.Unreplayable:
		return wrapperError(c.rawID, rpcError{
			Code:    CodeUnreplayable,
			Message: "this call already ran, but its response was too large to record and cannot be replayed",
			Data:    errorData{Reason: ReasonUnreplayable},
		})
	case claim.Status == idem.Completed:
		body, err := withID(claim.Result.Body, c.rawID)
		if err == nil {
			return body, true
		}
		m.log.Error("mcphttp: recorded response unreadable", "key_digest", idem.KeyDigest(req.Scope, req.Key), "err", err)
		return wrapperError(c.rawID, rpcError{
			Code:    CodeUnreplayable,
			Message: "this call already ran, but its recorded response cannot be replayed",
			Data:    errorData{Reason: ReasonUnreplayable},
		})
	default: // still in flight after the wait
		retry := time.Second
		if !claim.LeaseEnd.IsZero() {
			retry = max(time.Until(claim.LeaseEnd), 100*time.Millisecond)
			retry = min(retry, m.lease)
		}
		return wrapperError(c.rawID, rpcError{
			Code:    CodeInFlight,
			Message: "the same call is still running; retry it with the same id or _meta.idempotencyKey to get its result",
			Data:    errorData{Reason: ReasonInFlight, RetryAfterMs: retry.Milliseconds()},
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

func (c *capture) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range c.header {
		h[k] = append([]string(nil), vs...)
	}
	w.WriteHeader(c.status)
	_, _ = w.Write(c.body.Bytes())
}

// execute runs the call through the inner handler, streaming its answer to
// the client while recording the call's response, and completes or
// releases the claim.
func (m *wrapper) execute(w http.ResponseWriter, r *http.Request, c call, tok idem.Token, forward, source string) {
	// The inner handler runs on a context that outlives the client: a
	// client that drops its connection after sending the call is exactly
	// the one that will retry it, and its retry must find the response
	// recorded, not a second execution.
	ctx := context.WithoutCancel(r.Context())
	runCtx := ctx
	if m.cancelWithClient {
		runCtx = r.Context()
	}
	runCtx = NewContext(runCtx, Meta{
		SessionID: c.sessionID, IdempotencyKey: forward,
		Authorization: r.Header.Get("Authorization"), APIKey: r.Header.Get(APIKeyHeader),
	})
	ir := r.Clone(runCtx)
	if source != SourceMeta && forward != "" {
		ir.Header.Set(DerivedKeyHeader, forward)
	}
	rec := &recorder{w: w, id: c.id, limit: m.maxRecord}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { m.renew(ctx, r, tok, stop) })
	start := time.Now()
	done := false
	defer func() {
		close(stop)
		wg.Wait()
		if !done {
			// The inner handler panicked: nothing was recorded, so a
			// retry must be able to run again.
			m.release(ctx, r, tok, start)
		}
	}()
	m.next.ServeHTTP(rec, ir)
	done = true

	final, isError, oversize := rec.outcome()
	switch {
	case m.cutOff(r, final, isError):
		// The client went away and took the tool with it
		// (Options.CancelWithClient): nothing to record, and the retry
		// runs it again.
		m.release(ctx, r, tok, start)
	case final != nil && !isError:
		m.complete(ctx, r, tok, idem.Result{Status: rec.status, Body: final}, start)
	case final == nil && oversize:
		m.complete(ctx, r, tok, idem.Result{Status: rec.status, Unreplayable: true}, start)
	case final == nil && rec.status == http.StatusOK && rec.scan.sse:
		// The call's SSE stream ended without its response: the session
		// closed, or the server closed the stream for the client to
		// resume it elsewhere (SEP-1699). The tool may still be running,
		// so the claim is kept, unrenewed, until its lease runs out:
		// until then a retry waits or is told to retry, and never runs
		// the tool alongside.
		m.log.Info("mcphttp: call's stream ended without its response; claim left to its lease", "token", tok)
	default:
		// A JSON-RPC error, or no answer to the call at all (the inner
		// handler rejected the request): the call produced no result,
		// and a retry runs it again.
		m.release(ctx, r, tok, start)
	}
}

func (m *wrapper) renew(ctx context.Context, r *http.Request, tok idem.Token, stop <-chan struct{}) {
	t := time.NewTicker(m.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, m.lease/3)
			_, err := m.store.Renew(rctx, tok, m.lease)
			cancel()
			if errors.Is(err, idem.ErrStaleClaim) {
				m.log.Warn("mcphttp: claim lost while the call ran", "token", tok)
				m.observe(r, idem.Event{Kind: idem.EventStale, Scope: tok.Scope, Key: tok.Key, Err: err})
				return
			}
			if err != nil {
				m.log.Warn("mcphttp: renewing claim", "token", tok, "err", err)
				m.observe(r, idem.Event{Kind: idem.EventStoreError, Scope: tok.Scope, Key: tok.Key, Op: "renew", Err: err})
			}
		}
	}
}

func (m *wrapper) complete(ctx context.Context, r *http.Request, tok idem.Token, res idem.Result, start time.Time) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	e := idem.Event{Kind: idem.EventCompleted, Scope: tok.Scope, Key: tok.Key, Status: res.Status, Duration: time.Since(start)}
	switch err := m.store.Complete(ctx, tok, res); {
	case errors.Is(err, idem.ErrStaleClaim):
		m.log.Warn("mcphttp: claim lost while the call ran; its result is not recorded", "token", tok)
		e.Kind, e.Err = idem.EventStale, err
	case err != nil:
		m.log.Warn("mcphttp: recording the result failed; a retry after the lease runs out will run the call again", "token", tok, "err", err)
		e.Kind, e.Op, e.Err = idem.EventStoreError, "complete", err
	}
	m.observe(r, e)
}

func (m *wrapper) release(ctx context.Context, r *http.Request, tok idem.Token, start time.Time) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	e := idem.Event{Kind: idem.EventReleased, Scope: tok.Scope, Key: tok.Key, Duration: time.Since(start)}
	switch err := m.store.Release(ctx, tok); {
	case errors.Is(err, idem.ErrStaleClaim):
		m.log.Warn("mcphttp: claim lost while the call ran", "token", tok)
		e.Kind, e.Err = idem.EventStale, err
	case err != nil:
		m.log.Warn("mcphttp: releasing claim", "token", tok, "err", err)
		e.Kind, e.Op, e.Err = idem.EventStoreError, "release", err
	}
	m.observe(r, e)
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
