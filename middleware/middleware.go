package middleware

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/adapter"
	"github.com/idemkit/idem/internal/ctxvalue"
	"github.com/idemkit/idem/internal/identity"
)

// AdapterName is the middleware's name in the [idem.Event]s it reports
// (Event.Adapter), and so the adapter label of idemprom's and idemotel's
// metrics.
const AdapterName = "http"

// New returns the Idempotency-Key middleware, deduplicating requests through
// store. It panics if store is nil or opts is invalid (see [Options]); it
// never panics per request.
func New(store idem.Store, opts Options) func(http.Handler) http.Handler {
	if store == nil {
		panic("middleware: New with a nil store")
	}
	cfg := newConfig(opts)
	if _, ok := store.(idem.TxStore); cfg.inTx && !ok {
		panic(fmt.Sprintf("middleware: Options.InTransaction with a %T, which cannot claim in a transaction (not an idem.TxStore)", store))
	}
	eng := engine.New(store, cfg.engine)
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("middleware: nil handler")
		}
		return &handler{eng: eng, cfg: cfg, next: next}
	}
}

type handler struct {
	eng  *engine.Engine
	cfg  *config
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.methods[r.Method] {
		h.next.ServeHTTP(w, r)
		return
	}
	key, err := h.cfg.key(r)
	switch {
	case errors.Is(err, ErrNoKey):
		if h.cfg.keyOptional {
			h.report(r, idem.Event{Kind: idem.EventUnprotected, Reason: idem.UnprotectedNoKey})
			h.next.ServeHTTP(w, r)
			return
		}
		want := "an idempotency key"
		// Declared here, not before the switch: errors.As's target
		// escapes, and every request with a key would allocate it.
		var missing *MissingKeyError
		if errors.As(err, &missing) {
			want = missing.Want
		}
		h.refuseWith(w, r, idem.Event{Reason: idem.RefusedMissingKey}, problem{Type: TypeMissingKey, Status: http.StatusBadRequest,
			Detail: r.Method + " requests must carry " + want + ", so that a retry does not run them twice."})
		return
	case err != nil:
		h.refuseWith(w, r, idem.Event{Reason: idem.RefusedInvalidKey}, problem{Type: TypeInvalidKey, Status: http.StatusBadRequest, Detail: err.Error()})
		return
	}

	scope, err := h.cfg.scopeOf(r)
	if err != nil {
		h.refuse(w, r, err)
		return
	}

	body, err := readBody(w, r, h.cfg.maxBody)
	if err != nil {
		var tooLarge *http.MaxBytesError
		keyed := idem.Event{Scope: scope, Key: key}
		if errors.As(err, &tooLarge) {
			keyed.Reason = idem.RefusedBodyTooLarge
			h.refuseWith(w, r, keyed, problem{Type: TypeBodyTooLarge, Status: http.StatusRequestEntityTooLarge,
				Detail: "The request body is larger than " + strconv.FormatInt(h.cfg.maxBody, 10) + " bytes."})
			return
		}
		if r.Context().Err() == nil {
			keyed.Reason = idem.RefusedBodyUnreadable
			h.refuseWith(w, r, keyed, problem{Type: TypeBodyUnreadable, Status: http.StatusBadRequest, Detail: "The request body could not be read."})
		}
		return
	}

	req := &engine.Request{Claim: idem.ClaimRequest{
		Scope:       scope,
		Key:         key,
		Fingerprint: h.cfg.fingerprint(r, body),
		Labels:      idem.Labels{Method: r.Method, Route: identity.Route(r), Caller: h.cfg.scoper.Caller(r)},
	}, InTransaction: h.cfg.inTx}
	if obs := h.cfg.observer; obs != nil {
		req.Observe = func(e idem.Event) { obs(r, e) }
	}
	d := h.eng.Claim(r.Context(), req)
	switch d.Outcome {
	case engine.Run:
		h.execute(w, r, req, body, d)
	case engine.Replay:
		replay(w, d.Claim.Result)
	case engine.InFlight:
		writeProblem(w, problem{Type: TypeInFlight, Status: http.StatusConflict,
			Detail: "A request with this Idempotency-Key is still being processed. Retry later to get its result."},
			retryAfterSeconds(d.RetryAfter))
	case engine.Mismatch:
		writeProblem(w, problem{Type: TypeMismatch, Status: http.StatusUnprocessableEntity,
			Detail: "This Idempotency-Key was used for a different request (method, path, query, content type or body differ). Use a new key for a new request."}, "")
	case engine.InvalidKey: // reported by the engine
		writeProblem(w, problem{Type: TypeInvalidKey, Status: http.StatusBadRequest,
			Detail: "The store rejected the key: " + adapter.KeyReason(d.Err).Error()}, "")
	case engine.Unavailable:
		if h.cfg.failOpen {
			h.cfg.logger.WarnContext(r.Context(), "idempotency store failed; running the handler UNPROTECTED (FailOpen)",
				"key_digest", idem.KeyDigest(req.Claim.Scope, req.Claim.Key), "err", d.Err)
			h.report(r, idem.Event{Kind: idem.EventUnprotected, Reason: idem.UnprotectedFailOpen, Scope: scope, Key: key})
			withBody(r, body, new(bodyReader))
			h.next.ServeHTTP(w, r)
			return
		}
		detail := "The idempotency store could not be reached, so the request was not processed. Retry later with the same key."
		switch {
		case errors.Is(d.Err, idem.ErrCapacity):
			detail = "The idempotency store is full, so the request was not processed. Retry later with the same key."
		case errors.Is(d.Err, engine.ErrShutdown):
			detail = "The server is shutting down, so the request was not processed. Retry with the same key."
		}
		writeProblem(w, problem{Type: TypeStoreUnavailable, Status: http.StatusServiceUnavailable, Detail: detail}, retryAfterSeconds(d.RetryAfter))
	case engine.RequestEnded:
		// The request's context ended while it claimed or waited, and
		// nothing was claimed. Its client left, and this answer goes
		// nowhere; or the server ended it (a shutdown cancelling what
		// still runs), and the client, still connected, must be told to
		// retry rather than read the empty 200 net/http would send.
		h.notProcessed(w)
	}
}

// notProcessed answers a request whose handler did not run and that may be
// retried with its key: 503 with Retry-After.
func (h *handler) notProcessed(w http.ResponseWriter) {
	writeProblem(w, problem{Type: TypeStoreUnavailable, Status: http.StatusServiceUnavailable,
		Detail: "The request was cancelled before it was processed (the server may be shutting down). Retry with the same key."},
		retryAfterSeconds(h.eng.RetryAfter()))
}

// firstBodyBuffer is the most readBody allocates before a body's bytes
// arrive: a client that declares a large body and sends it slowly holds
// no more than that, and what it sent.
const firstBodyBuffer = 32 << 10

// readBody reads the whole request body, up to limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if r.ContentLength < 0 {
		return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	}
	// The server holds the body to its declared length, so a body up to
	// firstBodyBuffer takes one allocation of exactly its size; a larger
	// one a buffer that doubles, up to that size, as its bytes arrive.
	size := int(r.ContentLength)
	body := make([]byte, 0, min(size, firstBodyBuffer))
	for len(body) < size {
		if len(body) == cap(body) {
			body = append(make([]byte, 0, min(2*cap(body), size)), body...)
		}
		n, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if err == io.EOF && len(body) == size {
			break
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
	}
	return body, nil
}

// withBody gives the handler the body the middleware read, through b.
func withBody(r *http.Request, body []byte, b *bodyReader) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	b.Reset(body)
	r.Body = b
}

// bodyReader is the re-readable body the handler gets.
type bodyReader struct{ bytes.Reader }

func (bodyReader) Close() error { return nil }

// replay answers with a recorded result.
func replay(w http.ResponseWriter, res idem.Result) {
	if res.Unreplayable {
		writeProblem(w, problem{Type: TypeUnreplayable, Status: http.StatusGone, OriginalStatus: res.Status,
			Detail: "A request with this Idempotency-Key was already processed, but its response was too large to record. It will not be processed again."}, "")
		return
	}
	// The recorded values are shared by every replay of the key (a
	// memstore's entry, pgstore's replay cache): each replay gets copies,
	// in one backing array, so that an outer middleware that edits a
	// value in place, or appends, cannot change the record.
	hd := w.Header()
	n := 0
	for _, vs := range res.Header {
		n += len(vs)
	}
	all := make([]string, 0, n)
	for name, vs := range res.Header {
		all = append(all, vs...)
		hd[name] = all[len(all)-len(vs) : len(all) : len(all)]
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

// execute runs the handler under the claim d acquired, capturing its
// response for the engine to record.
func (h *handler) execute(w http.ResponseWriter, r *http.Request, req *engine.Request, body []byte, d engine.Decision) {
	x := h.eng.Start(r.Context(), req, d)
	if err := x.Err(); err != nil {
		// The work's context ended before the work began (the claim's
		// answer came after its lease ran out, the deadline passed, the
		// client left with Options.CancelWithClient): the key may be
		// another request's already, and a handler that does not check
		// its context would run its effect anyway.
		x.Finish(engine.Verdict{Action: engine.Release, Why: "the work's context ended before the handler was called: " + err.Error()})
		h.notProcessed(w)
		return
	}
	c := &call{h: h, x: x}
	c.rec.init(w, h.cfg)
	if x.InTransaction() {
		c.holdBack()
	}
	c.ctx = ctxvalue.Ctx[callKey, *call]{Context: x.Context(), Val: c}
	inner := r.WithContext(&c.ctx)
	withBody(inner, body, &c.body)
	x.Do(func(context.Context) engine.Verdict {
		h.next.ServeHTTP(&c.rec, inner)
		c.final = c.verdict()
		return c.final
	}, c.aborted)
	if c.rec.held != nil {
		c.sendHeld()
	}
}

// refuseWith answers r with p, before any claim, and reports it as an
// [idem.EventRefused] whose Reason (and Scope and Key, as far as known) e
// carries, logged at info.
func (h *handler) refuseWith(w http.ResponseWriter, r *http.Request, e idem.Event, p problem) {
	e.Kind, e.Status = idem.EventRefused, p.Status
	attrs := []any{"reason", e.Reason, "status", p.Status, "adapter", AdapterName}
	if !e.Key.IsZero() {
		attrs = append(attrs, "key_digest", idem.KeyDigest(e.Scope, e.Key))
	}
	h.cfg.logger.InfoContext(r.Context(), "idempotency middleware refused a request", attrs...)
	h.report(r, e)
	writeProblem(w, p, "")
}

// report reports e, an answer the middleware gave without the engine, to
// Options.Observer.
func (h *handler) report(r *http.Request, e idem.Event) {
	if obs := h.cfg.observer; obs != nil {
		e.Adapter = AdapterName
		obs(r, e)
	}
}
