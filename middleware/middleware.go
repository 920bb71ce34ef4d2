package middleware

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemkit/idem"
)

const defaultLease = idem.DefaultLease

// ErrLeaseLost is [idem.ErrLeaseLost], the cause ([context.Cause]) with
// which a handler's request context is cancelled when its claim can no
// longer be trusted. It is the same error value, kept here for existing
// callers.
var ErrLeaseLost = idem.ErrLeaseLost

// New returns the Idempotency-Key middleware, deduplicating requests through
// store. It panics if store is nil or opts is invalid (see [Options]); it
// never panics per request.
func New(store idem.Store, opts Options) func(http.Handler) http.Handler {
	if store == nil {
		panic("middleware: New with a nil store")
	}
	cfg := newConfig(opts)
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("middleware: nil handler")
		}
		return &handler{store: store, cfg: cfg, next: next}
	}
}

type handler struct {
	store idem.Store
	cfg   *config
	next  http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.methods[r.Method] {
		h.next.ServeHTTP(w, r)
		return
	}
	key, err := keyFromHeader(r.Header)
	switch {
	case err == errNoKey:
		if h.cfg.keyOptional {
			h.next.ServeHTTP(w, r)
			return
		}
		writeProblem(w, problem{Type: TypeMissingKey, Status: http.StatusBadRequest,
			Detail: r.Method + " requests must carry an Idempotency-Key header, so that a retry does not run them twice."}, "")
		return
	case err != nil:
		writeProblem(w, problem{Type: TypeInvalidKey, Status: http.StatusBadRequest, Detail: err.Error()}, "")
		return
	}

	body, err := readBody(w, r, h.cfg.maxBody)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeProblem(w, problem{Type: TypeBodyTooLarge, Status: http.StatusRequestEntityTooLarge,
				Detail: "The request body is larger than " + strconv.FormatInt(h.cfg.maxBody, 10) + " bytes."}, "")
			return
		}
		if r.Context().Err() == nil {
			writeProblem(w, problem{Type: TypeBodyUnreadable, Status: http.StatusBadRequest, Detail: "The request body could not be read."}, "")
		}
		return
	}

	req := idem.ClaimRequest{
		Scope:       h.cfg.scope(r),
		Key:         key,
		Fingerprint: h.cfg.fingerprint(r, body),
		Lease:       h.cfg.lease,
		Owner:       h.cfg.owner,
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.wait+h.cfg.storeTimeout)
	claim, err := idem.ClaimWait(ctx, h.store, req, h.cfg.wait)
	cancel()
	took := time.Since(start)
	if err != nil {
		h.claimFailed(w, r, req, body, err, took)
		return
	}
	switch claim.Status {
	case idem.Acquired:
		h.execute(w, r, req, body, claim, start, took)
	case idem.Completed:
		h.replay(w, r, req, claim.Result, took)
	case idem.InFlight:
		h.observe(r, idem.Event{Kind: idem.EventInFlight, Scope: req.Scope, Key: req.Key, Status: http.StatusConflict, Duration: took})
		h.log(r.Context(), slog.LevelInfo, "idempotency key in flight", req)
		retry := h.cfg.lease
		if !claim.LeaseEnd.IsZero() {
			// The lease end is on the store's clock; clamp it so that
			// a skewed clock cannot produce an absurd delay.
			retry = min(max(time.Until(claim.LeaseEnd), time.Second), h.cfg.lease)
		}
		writeProblem(w, problem{Type: TypeInFlight, Status: http.StatusConflict,
			Detail: "A request with this Idempotency-Key is still being processed. Retry later to get its result."},
			retryAfterSeconds(retry))
	default:
		h.claimFailed(w, r, req, body, errors.New("store returned an unknown claim status "+claim.Status.String()), took)
	}
}

// readBody reads the whole request body, up to limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if r.ContentLength >= 0 {
		// The server holds the body to its declared length: one
		// allocation of exactly the right size.
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// withBody gives the handler the body the middleware read.
func withBody(r *http.Request, body []byte) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	b := new(bodyReader)
	b.Reset(body)
	r.Body = b
}

// bodyReader is the re-readable body the handler gets.
type bodyReader struct{ bytes.Reader }

func (bodyReader) Close() error { return nil }

func (h *handler) claimFailed(w http.ResponseWriter, r *http.Request, req idem.ClaimRequest, body []byte, err error, took time.Duration) {
	switch {
	case r.Context().Err() != nil:
		// The client is gone: nobody to answer, nothing claimed.
		return
	case errors.Is(err, idem.ErrFingerprintMismatch):
		h.observe(r, idem.Event{Kind: idem.EventMismatch, Scope: req.Scope, Key: req.Key, Status: http.StatusUnprocessableEntity, Duration: took})
		h.log(r.Context(), slog.LevelInfo, "idempotency key reused for a different request", req)
		writeProblem(w, problem{Type: TypeMismatch, Status: http.StatusUnprocessableEntity,
			Detail: "This Idempotency-Key was used for a different request (method, path, query, content type or body differ). Use a new key for a new request."}, "")
		return
	case errors.Is(err, idem.ErrInvalidKey):
		writeProblem(w, problem{Type: TypeInvalidKey, Status: http.StatusBadRequest, Detail: "The store rejected the key: " + err.Error()}, "")
		return
	}
	h.observe(r, idem.Event{Kind: idem.EventStoreError, Scope: req.Scope, Key: req.Key, Op: "claim", Err: err, Duration: took})
	if h.cfg.failOpen {
		h.log(r.Context(), slog.LevelWarn, "idempotency store failed; running the handler UNPROTECTED (FailOpen)", req, slog.Any("err", err))
		withBody(r, body)
		h.next.ServeHTTP(w, r)
		return
	}
	h.log(r.Context(), slog.LevelWarn, "idempotency store failed; answering 503", req, slog.Any("err", err))
	retry := h.cfg.retryAfterSecs
	var unavailable *idem.UnavailableError
	if errors.As(err, &unavailable) && unavailable.RetryAfter > 0 {
		retry = retryAfterSeconds(unavailable.RetryAfter)
	}
	detail := "The idempotency store could not be reached, so the request was not processed. Retry later with the same key."
	if errors.Is(err, idem.ErrCapacity) {
		detail = "The idempotency store is full, so the request was not processed. Retry later with the same key."
	}
	writeProblem(w, problem{Type: TypeStoreUnavailable, Status: http.StatusServiceUnavailable, Detail: detail}, retry)
}

func (h *handler) replay(w http.ResponseWriter, r *http.Request, req idem.ClaimRequest, res idem.Result, took time.Duration) {
	h.observe(r, idem.Event{Kind: idem.EventReplayed, Scope: req.Scope, Key: req.Key, Status: res.Status, Duration: took})
	h.log(r.Context(), slog.LevelDebug, "replaying recorded response", req)
	if res.Unreplayable {
		writeProblem(w, problem{Type: TypeUnreplayable, Status: http.StatusGone, OriginalStatus: res.Status,
			Detail: "A request with this Idempotency-Key was already processed, but its response was too large to record. It will not be processed again."}, "")
		return
	}
	hd := w.Header()
	for name, vs := range res.Header {
		// The recorded slices are shared by every replay of the key:
		// clipped, an Add downstream reallocates instead of writing
		// into them.
		hd[name] = slices.Clip(vs)
	}
	hd[ReplayedHeader] = []string{"true"}
	if len(res.Body) > 0 {
		hd["Content-Length"] = []string{strconv.Itoa(len(res.Body))}
	}
	status := res.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(res.Body)
}

// storeCtx is the context of a store call made on behalf of a handler that
// ran: not cancelled when the client leaves (the side effect happened and
// must be recorded), but bounded.
func (c *call) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.detached, c.h.cfg.storeTimeout)
}

func (h *handler) execute(w http.ResponseWriter, r *http.Request, req idem.ClaimRequest, body []byte, claim idem.Claim, claimStart time.Time, took time.Duration) {
	h.observe(r, idem.Event{Kind: idem.EventClaimed, Scope: req.Scope, Key: req.Key, Duration: took})
	if claim.Takeover {
		h.log(r.Context(), slog.LevelInfo, "took over an abandoned idempotency claim", req, slog.Int64("generation", claim.Token.Generation))
	} else {
		h.log(r.Context(), slog.LevelDebug, "claimed idempotency key", req, slog.Int64("generation", claim.Token.Generation))
	}

	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	c := &call{h: h, r: r, req: req, tok: claim.Token, ctx: ctx, cancel: cancel, detached: context.WithoutCancel(r.Context())}
	c.rec = recorder{w: w, cfg: h.cfg}
	inner := r.WithContext(context.WithValue(ctx, callKey{}, c))
	withBody(inner, body)

	// The store started the lease during the claim, so claimStart plus the
	// lease is a safe local estimate of when it runs out.
	c.startRenewal(claimStart)
	ran := time.Now()
	finished := false
	defer func() {
		if finished {
			return
		}
		// The handler panicked (or called runtime.Goexit): release the
		// claim so that a retry runs again, and let the panic go on.
		c.stopRenewal()
		h.release(c, "handler panicked", time.Since(ran))
	}()
	h.next.ServeHTTP(&c.rec, inner)
	finished = true
	c.stopRenewal()
	dur := time.Since(ran)

	switch c.commit {
	case committed:
		h.observe(r, idem.Event{Kind: idem.EventCompleted, Scope: req.Scope, Key: req.Key, Status: c.committedStatus, Duration: dur})
		return
	case commitFailed:
		h.release(c, "in-transaction commit failed", dur)
		return
	}
	res := c.rec.result()
	if !h.cfg.recordPolicy(res.Status) {
		h.release(c, "status "+strconv.Itoa(res.Status)+" is not recorded", dur)
		return
	}
	sctx, scancel := c.storeCtx()
	err := h.store.Complete(sctx, c.tok, res)
	scancel()
	switch {
	case err == nil:
		h.observe(r, idem.Event{Kind: idem.EventCompleted, Scope: req.Scope, Key: req.Key, Status: res.Status, Duration: dur})
		if res.Unreplayable {
			h.log(r.Context(), slog.LevelInfo, "response larger than the record limit; key completed as unreplayable", req, slog.Int("status", res.Status))
		}
	case errors.Is(err, idem.ErrStaleClaim):
		c.stale(err)
	default:
		// The client has its answer, but a retry after the lease runs
		// out will run the handler again. Commit avoids this window.
		h.observe(r, idem.Event{Kind: idem.EventStoreError, Scope: req.Scope, Key: req.Key, Op: "complete", Err: err, Status: res.Status, Duration: dur})
		h.log(r.Context(), slog.LevelError, "could not record the response; a retry after the lease may run the handler again", req, slog.Any("err", err))
	}
}

// release returns c's key so that a retry runs the handler again.
func (h *handler) release(c *call, why string, dur time.Duration) {
	sctx, scancel := c.storeCtx()
	err := h.store.Release(sctx, c.tok)
	scancel()
	switch {
	case err == nil:
		h.observe(c.r, idem.Event{Kind: idem.EventReleased, Scope: c.req.Scope, Key: c.req.Key, Status: c.rec.status, Duration: dur})
		h.log(c.r.Context(), slog.LevelInfo, "released idempotency key: "+why, c.req)
	case errors.Is(err, idem.ErrStaleClaim):
		// Lost already, or (after a failed Commit whose transaction did
		// commit after all) completed: either way not ours to release.
		c.stale(err)
	default:
		// The claim stays until its lease runs out; then a retry runs.
		h.observe(c.r, idem.Event{Kind: idem.EventStoreError, Scope: c.req.Scope, Key: c.req.Key, Op: "release", Err: err, Duration: dur})
		h.log(c.r.Context(), slog.LevelWarn, "could not release idempotency key ("+why+"); a retry waits for the lease to run out", c.req, slog.Any("err", err))
	}
}

func (h *handler) observe(r *http.Request, e idem.Event) {
	if h.cfg.observer != nil {
		h.cfg.observer(r, e)
	}
}

// log logs msg with the key hashed; the key itself only at debug level.
func (h *handler) log(ctx context.Context, level slog.Level, msg string, req idem.ClaimRequest, attrs ...slog.Attr) {
	l := h.cfg.logger
	if !l.Enabled(ctx, level) {
		return
	}
	attrs = append(attrs, slog.String("key_hash", idem.KeyDigest(req.Scope, req.Key)))
	if l.Enabled(ctx, slog.LevelDebug) {
		attrs = append(attrs, slog.String("key", req.Key.String()))
	}
	l.LogAttrs(ctx, level, msg, attrs...)
}
