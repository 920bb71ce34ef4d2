package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// callKey is the context key under which a running handler finds its call.
type callKey struct{}

type commitState int

const (
	notCommitted commitState = iota
	committed                // Commit recorded the result
	commitFailed             // Commit's record failed; nothing recorded
)

// call is one execution of the handler under a claim.
type call struct {
	h      *handler
	r      *http.Request // the outer request
	req    idem.ClaimRequest
	tok    idem.Token
	ctx    context.Context // the handler's context
	cancel context.CancelCauseFunc
	rec    recorder
	// detached is the request's context without its cancellation: store
	// calls for a handler that ran must happen even if the client left.
	detached context.Context

	// Set on the handler's goroutine (by Commit), read after it returns.
	commit          commitState
	committedStatus int

	// Lease renewal. The timer's function runs on its own goroutine;
	// stopRenewal waits for a running renewal before the handler's
	// ServeHTTP returns, so none outlives the request.
	mu          sync.Mutex
	stopped     bool
	staleSeen   bool
	timer       *time.Timer
	renewing    sync.WaitGroup
	renewCtx    context.Context    // made by the first renewal: most requests need none
	renewCancel context.CancelFunc // cancels a renewal in progress when the handler returns
	deadline    time.Time          // local estimate of the lease end; renewal goroutine only
}

func (c *call) startRenewal(claimStart time.Time) {
	c.deadline = claimStart.Add(c.h.cfg.lease)
	c.mu.Lock()
	c.timer = time.AfterFunc(c.h.cfg.renewEvery, c.renew)
	c.mu.Unlock()
}

func (c *call) stopRenewal() {
	c.mu.Lock()
	c.stopped = true
	c.timer.Stop()
	cancel := c.renewCancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	c.renewing.Wait()
}

func (c *call) renew() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	if c.renewCtx == nil {
		c.renewCtx, c.renewCancel = context.WithCancel(c.detached)
	}
	c.renewing.Add(1)
	c.mu.Unlock()
	defer c.renewing.Done()

	cfg := c.h.cfg
	sent := time.Now()
	ctx, cancel := context.WithTimeout(c.renewCtx, cfg.storeTimeout)
	_, err := c.h.store.Renew(ctx, c.tok, cfg.lease)
	cancel()
	next := cfg.renewEvery
	switch {
	case err == nil:
		c.deadline = sent.Add(cfg.lease)
	case c.renewCtx.Err() != nil:
		return // the handler returned; the renewal no longer matters
	case errors.Is(err, idem.ErrStaleClaim):
		c.lose(err)
		return
	default:
		c.h.observe(c.r, idem.Event{Kind: idem.EventStoreError, Scope: c.req.Scope, Key: c.req.Key, Op: "renew", Err: err, Duration: time.Since(sent)})
		left := time.Until(c.deadline)
		if left <= 0 {
			// The store may have let the lease run out: another request
			// may own the key now. Without a confirmed claim the handler
			// must not go on.
			c.lose(fmt.Errorf("lease ran out without a successful renewal: %w", err))
			return
		}
		c.h.log(c.r.Context(), slog.LevelWarn, "could not renew idempotency lease; retrying", c.req, slog.Any("err", err))
		next = min(next, left)
	}
	c.mu.Lock()
	if !c.stopped {
		c.timer.Reset(next)
	}
	c.mu.Unlock()
}

// lose cancels the handler because its claim is gone.
func (c *call) lose(err error) {
	c.cancel(ErrLeaseLost)
	c.stale(err)
}

// stale reports, once, that the claim is no longer the request's.
func (c *call) stale(err error) {
	c.mu.Lock()
	seen := c.staleSeen
	c.staleSeen = true
	c.mu.Unlock()
	if seen {
		return
	}
	c.h.observe(c.r, idem.Event{Kind: idem.EventStale, Scope: c.req.Scope, Key: c.req.Key, Err: err})
	c.h.log(c.r.Context(), slog.LevelWarn, "idempotency claim lost; the response is not recorded", c.req, slog.Any("err", err))
}

// TokenFrom returns the claim token of the request whose context is ctx,
// when the middleware claimed a key for it. The token's generation is a
// fencing token: a handler may store it with its own writes and refuse
// writes from an older generation.
func TokenFrom(ctx context.Context) (idem.Token, bool) {
	c, ok := ctx.Value(callKey{}).(*call)
	if !ok {
		return idem.Token{}, false
	}
	return c.tok, true
}

// Errors of [Commit].
var (
	// ErrNoClaim: the request holds no claim (it was not protected: its
	// method is not protected, its key was optional and absent, or the
	// store failed with Options.FailOpen). Commit did nothing; the handler
	// commits its transaction and writes its response itself.
	ErrNoClaim = errors.New("middleware: the request holds no idempotency claim")
	// ErrCommitted: Commit was already called for this request.
	ErrCommitted = errors.New("middleware: Commit already called for this request")
	// ErrResponseStarted: the handler wrote (part of) its response before
	// Commit; Commit must write the whole response.
	ErrResponseStarted = errors.New("middleware: the response was started before Commit")
)

// RecordFunc records res for tok inside the handler's own transaction and
// commits it, for example:
//
//	func(ctx context.Context, tok idem.Token, res idem.Result) error {
//		if err := store.CompleteTx(ctx, tx, tok, res); err != nil {
//			return err
//		}
//		return tx.Commit(ctx)
//	}
//
// It returns nil only if both the handler's writes and the result are
// committed.
type RecordFunc func(ctx context.Context, tok idem.Token, res idem.Result) error

// Commit answers a request with status, header and body, recording that
// answer through record before anything is written: the way to complete a
// key inside the handler's own database transaction, so that the handler's
// writes and the recorded response commit together or not at all
// (exactly-once for side effects in the same database as the store, such as
// pgstore's Store.CompleteTx).
//
// Commit merges header into w.Header() (a name in header replaces that name's
// values), then builds the [idem.Result] exactly as the middleware would
// capture this response: the status, the recorded headers
// (Options.RecordHeaders) of w.Header(), and body, or an unreplayable result
// if body is larger than Options.MaxRecordBytes. Commit takes ownership of
// body. It calls record with the request's context and claim token. Record
// policy does not apply: what Commit records is replayed, whatever the
// status.
//
//   - If record succeeds, Commit writes the response and returns nil (even if
//     the client is gone: its retry gets the replay), and the middleware does
//     not complete the key again.
//   - If record fails, or the claim was lost before it was called (the
//     context was cancelled with [ErrLeaseLost]: record is then not called),
//     Commit writes no success. It answers 503 problem+json
//     ([TypeCommitFailed]) with Retry-After and returns the error; the
//     middleware then releases the claim, so a retry runs the handler again.
//     That is safe because the handler's transaction did not commit; if its
//     commit did succeed despite the error, the key is completed and the
//     retry replays it. The handler must write nothing more.
//   - Without a claim it returns [ErrNoClaim] and does nothing.
//
// w and r are the ones the handler was given; call Commit from the handler's
// goroutine, at most once, before writing anything else.
func Commit(w http.ResponseWriter, r *http.Request, status int, header http.Header, body []byte, record RecordFunc) error {
	c, ok := r.Context().Value(callKey{}).(*call)
	switch {
	case !ok:
		return ErrNoClaim
	case c.commit != notCommitted:
		return ErrCommitted
	case c.rec.status != 0:
		return ErrResponseStarted
	case status < 200 || status > 999:
		return fmt.Errorf("middleware: Commit with invalid status %d", status)
	}
	cfg := c.h.cfg
	hd := w.Header()
	for name, vs := range header {
		hd[name] = vs
	}
	res := idem.Result{Status: status, Header: cfg.snapshot(hd), Body: body}
	if len(body) > cfg.maxRecord {
		res = idem.Result{Status: status, Unreplayable: true}
	}

	err := context.Cause(c.ctx)
	if err == nil {
		err = record(c.ctx, c.tok, res)
	}
	if err != nil {
		c.commit = commitFailed
		// Take back what was merged: the failure answer must not carry
		// the success's headers.
		for name := range header {
			hd.Del(name)
		}
		c.h.log(c.r.Context(), slog.LevelWarn, "in-transaction commit failed; releasing the key", c.req, slog.Any("err", err))
		writeProblem(w, problem{Type: TypeCommitFailed, Status: http.StatusServiceUnavailable,
			Detail: "The request could not be committed, so it took no effect. Retry later with the same key."}, cfg.retryAfterSecs)
		return fmt.Errorf("middleware: recording the result: %w", err)
	}
	c.commit, c.committedStatus = committed, status
	// The result is recorded: the capture would be a second copy of body.
	c.rec.overflow = true
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return nil
}
