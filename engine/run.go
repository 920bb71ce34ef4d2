package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pause"
)

// Action is what to do with a claim once the work returned.
type Action int

const (
	// Release returns the key, so that a retry runs the work again: the
	// work produced nothing worth replaying (a failure the adapter's
	// policy does not record). The zero Action, and the safe one: nothing
	// unconfirmed is ever recorded.
	Release Action = iota
	// Complete completes the key with Verdict.Result.
	Complete
	// CompletedByWork reports that the work recorded its result itself (inside
	// its own transaction); the engine only reports the completion.
	CompletedByWork
	// LeaveToLease keeps the claim, unrenewed, until its lease runs out: the
	// work may still be going on elsewhere, or may have answered where
	// the adapter could not see it (an MCP stream that ended before the
	// call's response), so neither a result nor a release would be true.
	// Until then a retry waits or is told to retry. It holds even for
	// work whose context ended.
	LeaveToLease
)

func (a Action) String() string {
	switch a {
	case Release:
		return "release"
	case Complete:
		return "complete"
	case CompletedByWork:
		return "completed by the work"
	case LeaveToLease:
		return "leave to lease"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Verdict is the adapter's reading of how the work ended, from what it
// captured: what to do with the claim. The engine applies it unless a rule
// of its own overrides it (see "What is recorded" in the package
// documentation).
type Verdict struct {
	Action Action
	// Result is what Complete completes the key with, and, for CompletedByWork,
	// what was recorded (its Status is reported).
	Result idem.Result
	// Why says, for the logs, why a Release or LeaveToLease.
	Why string
}

// Execution is the work of one request under the claim it acquired: the
// work's context, its token, and the lease renewal that runs beside it.
// Make one with [Engine.Start]; end it with [Execution.Finish] or run the
// work through [Execution.Do].
type Execution struct {
	e       *Engine
	req     *Request
	tok     idem.Token
	logCtx  context.Context // the client's context, for logs only
	ctx     context.Context // the work's context
	cancel  context.CancelCauseFunc
	store   context.Context // detached from the client: for renew, complete, release
	began   time.Time
	stopOff func() bool // stops the Shutdown watch

	deadline     time.Time          // the work's: MaxExecution or the client's; zero if none
	stopDeadline context.CancelFunc // releases the deadline's timer

	mu         sync.Mutex
	finished   bool
	lost       bool
	lostStale  bool        // lost because a renewal found the claim stale
	leaseEnd   time.Time   // lease end minus the margin, on the process clock
	leaseTimer *time.Timer // fires at leaseEnd: the lease is lost
	renewTimer *time.Timer
	renewing   sync.WaitGroup
	stopRenew  context.CancelFunc // cancels a renewal in progress

	tx        idem.TxClaim // the claim's transaction, for a request InTransaction
	committed bool         // the transaction committed with the result
	txEnded   bool         // the transaction is over (committed or rolled back)
	// limit is the bound at which the database ended the transaction,
	// if that is why it did not commit.
	limit *idem.TxLimitError
}

// Start begins the work of a request whose claim d acquired (Outcome Run).
// clientCtx is the client's request context: the work's context keeps its
// values, but ends with it only with Options.CancelWithClient. The work's
// context always ends, with cause [idem.ErrLeaseLost], before the lease
// could run out unrenewed, and with cause [ErrShutdown] when
// Options.Shutdown is done. The lease is renewed until [Execution.Finish].
// If the work's context has ended already when Start returns
// ([Execution.Err] not nil: the claim answered after the lease, a deadline
// passed, the client gone with Options.CancelWithClient), the key may be
// another request's: do not begin the work; Finish with Release.
func (e *Engine) Start(clientCtx context.Context, req *Request, d Decision) *Execution {
	x := &Execution{e: e, req: req, tok: d.Claim.Token, logCtx: clientCtx, store: context.WithoutCancel(clientCtx), began: time.Now(), tx: d.tx}
	base := x.store
	if e.cancelWithCl {
		base = clientCtx
	}
	x.ctx, x.cancel = context.WithCancelCause(base)
	// The work's context is detached from the client's cancellation, not
	// from a deadline the service set on the request.
	x.deadline, _ = clientCtx.Deadline()
	if e.maxExecution > 0 {
		if limit := x.began.Add(e.maxExecution); x.deadline.IsZero() || limit.Before(x.deadline) {
			x.deadline = limit
		}
	}
	x.stopDeadline = func() {}
	if !x.deadline.IsZero() {
		x.ctx, x.stopDeadline = context.WithDeadlineCause(x.ctx, x.deadline, ErrExecutionTimeout)
	}
	if x.tx != nil {
		x.ctx = x.tx.Context(x.ctx)
	}
	if e.shutdown != nil {
		x.stopOff = context.AfterFunc(e.shutdown, func() { x.cancel(ErrShutdown) })
	}
	// The store started the lease when it ran the claim, after the claim
	// was sent: the moment it was sent plus the lease is never later than
	// the lease end, but for the two clocks' drift, which the margin
	// covers along with the timer's latency and the time the work takes
	// to notice.
	x.leaseEnd = req.sent.Add(e.lease - e.margin)
	x.mu.Lock()
	if x.tx != nil {
		// A claim in a transaction has no lease to renew or lose: nobody
		// else sees it, and the store ends a transaction whose process
		// stopped (see "In a transaction").
		x.leaseTimer, x.renewTimer = idleTimer, idleTimer
		x.mu.Unlock()
		return x
	}
	x.leaseTimer = time.AfterFunc(time.Until(x.leaseEnd), func() {
		why := "the lease was about to run out without a confirmed renewal"
		if x.pastDeadline() {
			why = "the work ran past its deadline, and its lease, no longer renewed, was about to run out"
		}
		x.lose(errors.New(why))
	})
	x.renewTimer = time.AfterFunc(e.renewEvery, x.renew)
	over := !time.Now().Before(x.leaseEnd)
	x.mu.Unlock()
	if over {
		// The claim's answer came after its lease (less the margin) ran
		// out: the process stalled between sending the claim and reading
		// it, and the key may be another's by now. The work starts with
		// its context ended, not a moment later from the timer, which
		// would let work that checks its context first run anyway.
		x.lose(errors.New("the lease ran out before the work started (the claim's answer came after it)"))
	}
	return x
}

// Context returns the work's context.
func (x *Execution) Context() context.Context { return x.ctx }

// Token returns the claim's token: the fencing token the work may store
// with its own writes.
func (x *Execution) Token() idem.Token { return x.tok }

// Err returns why the work's context ended ([idem.ErrLeaseLost],
// [ErrShutdown], or the client's cause with Options.CancelWithClient), or
// nil while it has not.
func (x *Execution) Err() error {
	if x.ctx.Err() == nil {
		return nil
	}
	return context.Cause(x.ctx)
}

// Do runs work under the execution and finishes it with the verdict work
// returns. If work panics, Do finishes the execution and panics again with
// the same value: with [http.ErrAbortHandler], the verdict aborted returns
// (the adapter knows whether what it captured is whole; nil means release);
// with anything else, or runtime.Goexit, the key is released, since a
// panicking work answered nothing it meant to.
func (x *Execution) Do(work func(ctx context.Context) Verdict, aborted func() Verdict) {
	done := false
	defer func() {
		if done {
			return
		}
		p := recover()
		v := Verdict{Action: Release, Why: "the work panicked"}
		if p == nil {
			v.Why = "the work exited its goroutine (runtime.Goexit)"
		} else if p == http.ErrAbortHandler && aborted != nil { // compared as net/http compares it
			v = aborted()
		}
		x.Finish(v)
		if p != nil {
			panic(p)
		}
	}()
	v := work(x.ctx)
	done = true
	x.Finish(v)
}

// Finish ends the execution: it stops the lease renewal (waiting for one in
// progress), then applies v, unless the engine's own rules say otherwise
// (see "What is recorded" in the package documentation). A whole answer the
// adapter's policy records (Action Complete) is recorded even if the work's
// context ended first (its lease was lost, Options.Shutdown, its client with
// Options.CancelWithClient): the work did its side effect, and the
// completion is fenced by the generation, so it records nothing if another
// request took the key over. Work whose adapter cannot tell whether it
// answered (Action LeaveToLease) is left to its lease, cut off or not. Other work
// whose context ended without a whole answer to record is released (fenced
// too), whatever v says. Work whose renewal found the claim taken over is
// neither recorded nor released: the key is the new owner's. Call Finish
// exactly once, after the work returned.
func (x *Execution) Finish(v Verdict) {
	if x.tx != nil {
		defer x.endTx()
		v = x.txVerdict(v)
	}
	x.mu.Lock()
	x.finished = true
	lost, lostStale, leaseEnd := x.lost, x.lostStale, x.leaseEnd
	x.leaseTimer.Stop()
	x.renewTimer.Stop()
	stop := x.stopRenew
	x.mu.Unlock()
	if stop != nil {
		stop()
	}
	x.renewing.Wait()
	if x.stopOff != nil {
		x.stopOff()
	}
	ran := time.Since(x.began)
	// Whether the work was cut off decides only what happens to a work
	// without a whole answer to record, so a Shutdown that fires as the
	// work returns (before or after stopOff) cannot change what a whole
	// answer becomes.
	cause := x.Err()
	x.cancel(nil)
	x.stopDeadline()

	switch {
	case v.Action == CompletedByWork:
		x.e.observe(x.req, idem.Event{Kind: idem.EventCompleted, Status: v.Result.Status, Duration: ran})
	case lostStale:
		// A renewal found the key taken over (or forgotten): completing
		// or releasing would find it stale too, and the new owner's
		// outcome is the key's.
		x.e.log(x.logCtx, slog.LevelInfo, "the work of a claim taken over ended; nothing recorded", x.req)
	case v.Action == Complete && !(mutantReleaseAfterAnswer() && (lost || cause != nil)):
		// Reported as lost already, if it was: a completion that finds
		// the key taken over is not reported again.
		x.complete(v.Result, ran, !lost, leaseEnd)
	case v.Action == LeaveToLease:
		// The adapter cannot tell whether the work answered (cut off or
		// not): a release would let a retry run it again beside, or
		// after, a work that did its effect.
		x.e.observe(x.req, idem.Event{Kind: idem.EventLeft, Duration: ran})
		x.e.log(x.logCtx, slog.LevelInfo, "claim left to its lease: "+v.Why, x.req)
	case lost:
		x.release("the claim was lost while the work ran, and it answered nothing to record", idem.ErrLeaseLost, false, ran)
	case cause != nil:
		x.release(fmt.Sprintf("the work was cut off (%v), and it answered nothing to record", cause), cause, true, ran)
	default:
		x.release(v.Why, nil, true, ran)
	}
}

// storeCtx bounds a store call made for the work: detached from the client
// (the work ran, and its result must be recorded or released), but bounded.
func (x *Execution) storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(x.store, x.e.storeTimeout)
}

// complete records res. A completion that finds the claim stale reports
// EventStale only if reportStale.
//
// A transient failure (the store unreachable, a connection dropped, a
// database failing over) is tried again until StoreTimeout, or until
// leaseEnd (the lease's end less the margin, as of the last confirmed
// renewal) if that is later: the work ran, and without its result a retry
// after the lease would run it again; until the lease ends nobody can take
// the key over, so a failover shorter than the lease is ridden out. Each
// attempt is bounded by StoreTimeout. The generation makes a second attempt
// safe, and an attempt that took effect although its answer was lost leaves
// the key completed by this very generation, which the next attempt finds
// stale.
func (x *Execution) complete(res idem.Result, ran time.Duration, reportStale bool, leaseEnd time.Time) {
	if x.tx != nil {
		x.completeTx(res, ran, reportStale)
		return
	}
	until := time.Now().Add(x.e.storeTimeout)
	if leaseEnd.After(until) {
		until = leaseEnd
	}
	ctx, cancel := context.WithDeadline(x.store, until)
	defer cancel()
	attempt := func() error {
		actx, cancel := context.WithTimeout(ctx, x.e.storeTimeout)
		defer cancel()
		return x.e.store.Complete(actx, x.tok, res)
	}
	err := attempt()
	attempts := 1
	for ; errors.Is(err, idem.ErrUnavailable) && pauseBeforeStoreRetry(ctx, attempts-1); attempts++ {
		if attempts == 1 {
			x.e.log(x.logCtx, slog.LevelWarn, "could not record the result; retrying while the claim is held", x.req,
				slog.Any("err", err), slog.Duration("until", time.Until(until).Round(time.Millisecond)))
		}
		err = attempt()
		var se *idem.StaleClaimError
		if errors.As(err, &se) && se.Current == x.tok.Generation {
			err = nil
		}
	}
	switch {
	case err == nil:
		x.e.observe(x.req, idem.Event{Kind: idem.EventCompleted, Status: res.Status, Duration: ran})
		if attempts > 1 {
			x.e.log(x.logCtx, slog.LevelInfo, "recorded the result once the store answered again", x.req, slog.Int("attempts", attempts))
		}
		if res.Unreplayable {
			x.e.log(x.logCtx, slog.LevelInfo, "result not replayable; key completed as unreplayable", x.req, slog.Int("status", res.Status))
		}
	case errors.Is(err, idem.ErrStaleClaim):
		x.stale(err, ran, reportStale)
	default:
		// The client may have its answer, but a retry after the lease
		// runs out runs the work again: an in-transaction completion
		// (middleware.Commit) closes this window.
		x.e.observe(x.req, idem.Event{Kind: idem.EventStoreError, Op: "complete", Err: err, Status: res.Status, Duration: ran})
		x.e.log(x.logCtx, slog.LevelError, "could not record the result; a retry after the lease may run the work again", x.req,
			slog.Any("err", err), slog.Int("attempts", attempts))
	}
}

// pauseBeforeStoreRetry waits before retry number retry of a store call
// that found the store unavailable: 10 ms, doubling up to a second,
// jittered. It reports false if ctx ends first.
func pauseBeforeStoreRetry(ctx context.Context, retry int) bool {
	return pause.Backoff(ctx, retry, 10*time.Millisecond, time.Second)
}

// release releases the key; cause is the reason the work was cut off, if it
// was. A release that finds the claim stale reports EventStale only if
// reportStale.
func (x *Execution) release(why string, cause error, reportStale bool, ran time.Duration) {
	if x.tx != nil {
		x.rollbackTx(why, cause, ran)
		return
	}
	ctx, cancel := x.storeCtx()
	err := x.e.store.Release(ctx, x.tok)
	cancel()
	switch {
	case err == nil:
		x.e.observe(x.req, idem.Event{Kind: idem.EventReleased, Err: cause, Duration: ran})
		x.e.log(x.logCtx, slog.LevelInfo, "released idempotency key: "+why, x.req)
	case errors.Is(err, idem.ErrStaleClaim):
		// Lost already, or completed (an in-transaction commit that
		// reported failure but did commit): not ours to release.
		if reportStale {
			x.stale(err, ran, true)
		}
	default:
		// The claim stays until its lease runs out; then a retry runs.
		x.e.observe(x.req, idem.Event{Kind: idem.EventStoreError, Op: "release", Err: err, Duration: ran})
		x.e.log(x.logCtx, slog.LevelWarn, "could not release idempotency key ("+why+"); a retry waits for the lease to run out", x.req, slog.Any("err", err))
	}
}

// stale logs that the claim was found stale, and reports EventStale if
// report (a claim lost while the work ran was reported already).
func (x *Execution) stale(err error, ran time.Duration, report bool) {
	if report {
		x.e.observe(x.req, idem.Event{Kind: idem.EventStale, Err: err, Duration: ran})
	}
	x.e.log(x.logCtx, slog.LevelWarn, "idempotency claim lost; the result is not recorded", x.req, slog.Any("err", err))
}
