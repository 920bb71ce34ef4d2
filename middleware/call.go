package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/ctxvalue"
)

// callKey is the context key under which a running handler finds its call.
type callKey struct{}

type commitState int

const (
	notCommitted commitState = iota
	committed                // Commit recorded the result
	commitFailed             // Commit's record failed; nothing recorded
)

// call is one execution of the handler under a claim: the engine's
// execution, and what the middleware captures of the handler's response.
type call struct {
	h   *handler
	x   *engine.Execution
	rec recorder

	// Set on the handler's goroutine (by Commit), read after it returns.
	commit          commitState
	committedStatus int
	// final is the verdict the handler's return gave.
	final engine.Verdict
	// held is what rec.held points to while the response is held back
	// (holdBack), kept in the call so that holding costs no allocation of
	// its own.
	held held
	// ctx is the handler's context (carrying the call), and body its
	// request body, held here so that the call allocates both.
	ctx  ctxvalue.Ctx[callKey, *call]
	body bodyReader
}

// holdBack holds the response back until the claim's transaction commits
// (Options.InTransaction).
func (c *call) holdBack() {
	var before http.Header
	if h := c.rec.W.Header(); len(h) > 0 {
		before = h.Clone()
	}
	c.held = held{before: before, call: c}
	c.rec.held = &c.held
}

// commitEarly commits the claim's transaction with res, an unreplayable
// result, while the handler runs: its response outgrew the record limit
// and cannot be held any longer (recorder.spill).
func (c *call) commitEarly(res idem.Result) error {
	if err := c.x.Commit(res); err != nil {
		c.commit = commitFailed
		return err
	}
	c.commit, c.committedStatus = committed, res.Status
	return nil
}

// sendHeld sends the response held back, once the handler returned and the
// engine finished: the handler's answer if its transaction committed with
// it, or if it was a failure the middleware does not record (rolled back
// with everything else, it is true) and not PostgreSQL's ending the
// transaction; otherwise, a response that should have been recorded did
// not commit, or the transaction met a bound of PostgreSQL's, and the
// client gets the middleware's answer instead (commitFailed), with none of
// the handler's headers.
func (c *call) sendHeld() {
	rec, h := &c.rec, c.rec.held
	switch {
	case h.sent:
	case !h.failed && (c.x.Committed() || c.final.Action == engine.Release && c.x.TxLimitErr() == nil):
		h.sent = true
		h.sendHeader(rec.W)
		rec.W.WriteHeader(rec.Status)
		_, _ = rec.W.Write(rec.body)
	default:
		h.sent = true
		c.takeBackHeaders()
		c.commitFailed(rec.W)
	}
}

// takeBackHeaders puts the header map of a held response back as it was
// before the handler ran: the failure answer that replaces a response
// whose transaction did not commit carries none of the handler's headers.
func (c *call) takeBackHeaders() { setHeader(c.rec.W, c.rec.held.before) }

// commitFailed answers 503: the request's transaction did not commit, or
// the commit's outcome is unknown (the connection was lost during it), so
// the answer says neither that it took effect nor that it did not. A retry
// with the same key tells: it replays the result if the commit went
// through, and runs the handler again if it did not. If PostgreSQL ended
// the transaction at one of its bounds, it answers 500 instead
// (transactionLimit): a retry would end the same way.
func (c *call) commitFailed(w http.ResponseWriter) {
	if le := c.x.TxLimitErr(); le != nil {
		transactionLimit(w, le)
		return
	}
	writeProblem(w, problem{Type: TypeCommitFailed, Status: http.StatusServiceUnavailable,
		Detail: "The request's transaction did not commit, or the outcome of its commit is unknown. Retry later with the same key: if it committed, the retry gets its response; if not, it runs again."}, retryAfterSeconds(c.h.eng.RetryAfter()))
}

// verdict reads how the handler ended from what it answered.
func (c *call) verdict() engine.Verdict {
	switch c.commit {
	case committed:
		return engine.Verdict{Action: engine.CompletedByWork, Result: idem.Result{Status: c.committedStatus}}
	case commitFailed:
		return engine.Verdict{Action: engine.Release, Why: "in-transaction commit failed"}
	}
	if c.rec.Gone != nil && c.h.cfg.engine.CancelWithClient {
		// The handler was told its writes failed (Options.Engine.CancelWithClient)
		// and may have stopped short of its answer.
		return engine.Verdict{Action: engine.Release, Why: "the client went away mid-response"}
	}
	res := c.rec.result()
	if !c.h.cfg.recordPolicy(res.Status) {
		return engine.Verdict{Action: engine.Release, Why: "status " + strconv.Itoa(res.Status) + " is not recorded"}
	}
	if !c.rec.whole() {
		// The handler declared a length it did not write: the client got
		// a broken response, and a replay must not pass it off as whole.
		return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: res.Status, Unreplayable: true}}
	}
	return engine.Verdict{Action: engine.Complete, Result: res}
}

// aborted reads how a handler that panicked with http.ErrAbortHandler ended
// (httputil.ReverseProxy does when the upstream's body breaks off). Before
// it answered, nothing is recorded and the key is released, as for any
// panic. After, what it sent is recorded only if it was captured whole (its
// declared Content-Length, all written); otherwise the key completes as
// unreplayable: the side effect ran, and a partial body must never be
// replayed as the answer.
func (c *call) aborted() engine.Verdict {
	if c.commit == notCommitted && c.rec.Status == 0 {
		return engine.Verdict{Action: engine.Release, Why: "the handler aborted before answering"}
	}
	v := c.verdict()
	if v.Action == engine.Complete && !c.rec.declared() {
		v.Result = idem.Result{Status: v.Result.Status, Unreplayable: true}
	}
	return v
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
	return c.x.Token(), true
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

// ErrRecordFunc: Commit was given a record function under
// Options.InTransaction, where the claim's transaction records and commits
// (pass nil), or a nil one without it. Commit answered 503, and nothing of
// the request is recorded.
var ErrRecordFunc = errors.New("middleware: Commit's record must be nil under Options.InTransaction, where the claim's transaction records the result, and a function without it")

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
//     context was cancelled with [idem.ErrLeaseLost]: record is then not called),
//     Commit writes no success. It answers 503 problem+json
//     ([TypeCommitFailed]) with Retry-After and returns the error; the
//     middleware then releases the claim, so a retry runs the handler again.
//     That is safe because the handler's transaction did not commit; if its
//     commit did succeed despite the error, the key is completed and the
//     retry replays it. The handler must write nothing more.
//   - Without a claim it returns [ErrNoClaim] and does nothing.
//
// Under Options.InTransaction record must be nil: Commit records the
// result in the claim's transaction and commits it, with the handler's
// writes (a record function there is refused with [ErrRecordFunc]).
// A handler there may as well just write its response, which the
// middleware holds back until it committed; Commit is for one that wants
// to know, before it returns, whether the commit succeeded. Without
// InTransaction, a nil record is refused the same way.
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
	case c.rec.Status != 0:
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

	inTx := c.x.InTransaction()
	if c.rec.held != nil {
		c.rec.held.sent = true // Commit answers, after the commit
	}
	err := c.x.Err()
	switch {
	case err != nil:
	case inTx && record != nil, !inTx && record == nil:
		err = ErrRecordFunc
	case inTx:
		err = c.x.Commit(res)
	default:
		err = record(c.x.Context(), c.x.Token(), res)
	}
	if err != nil {
		c.commit = commitFailed
		// The failure answer must not carry the success's headers: take
		// back every header of the handler's if the response was held,
		// else what was merged.
		if c.rec.held != nil {
			c.takeBackHeaders()
		} else {
			for name := range header {
				hd.Del(name)
			}
		}
		c.commitFailed(w)
		return fmt.Errorf("middleware: recording the result: %w", err)
	}
	c.commit, c.committedStatus = committed, status
	// The result is recorded: the capture would be a second copy of body.
	c.rec.overflow = true
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return nil
}
