package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
)

// errNoTxStore is the claim error of a request InTransaction to an engine
// whose store is not an [idem.TxStore]. Adapters refuse that combination at
// construction; this is for a third-party adapter that does not.
var errNoTxStore = &idem.UnavailableError{Op: "claim", Err: errors.New("engine: the store cannot claim in a transaction (it is not an idem.TxStore)")}

// claimInTx claims req's key in a transaction of the store, waiting up to
// wait for a duplicate still in flight: for one held by another open
// transaction, in the store (the database makes the claim wait for it);
// for one held by a two-phase claim, with the store's Wait, as
// idem.ClaimWait does, then in a new transaction.
func (e *Engine) claimInTx(ctx context.Context, req *Request, wait time.Duration) (idem.Claim, idem.TxClaim, error) {
	if e.txs == nil {
		return idem.Claim{}, nil, errNoTxStore
	}
	deadline := time.Now().Add(wait)
	for {
		left := max(time.Until(deadline), 0)
		req.sent = time.Now()
		cctx, cancel := context.WithTimeout(ctx, left+e.storeTimeout)
		c, tx, err := e.txs.BeginClaim(cctx, req.Claim, e.txLimits(left))
		cancel()
		if err != nil || c.Status != idem.InFlight || c.LeaseEnd.IsZero() || left <= 0 {
			return c, tx, err
		}
		began := time.Now()
		wctx, cancel := context.WithTimeout(ctx, left)
		werr := e.store.Wait(wctx, req.Claim.Scope, req.Claim.Key)
		cancel()
		req.waited += time.Since(began)
		if werr != nil && ctx.Err() != nil {
			return c, nil, ctx.Err()
		}
		// Claim again: the holder may have finished, or, if the wait ran
		// out, one last look without waiting.
	}
}

// txLimits are the bounds of a claim's transaction: the wait left,
// Options.IdleInTransaction as the longest the transaction may stay idle
// (for a claim in a transaction its statements are its signs of life, and
// the store ends a transaction whose process stopped sending them), and
// Options.MaxExecution as the longest a statement may run (the work's
// context ends then too).
func (e *Engine) txLimits(wait time.Duration) idem.TxLimits {
	return idem.TxLimits{Wait: wait, Idle: e.idle, Execution: e.maxExecution}
}

// TxLimitErr returns, once [Execution.Finish] returned (or a Commit
// failed), the bound at which the database ended the claim's transaction,
// or cancelled a statement of the work, when that is why it did not
// commit; nil otherwise. An adapter answers the client with it
// ([ExplainTxLimit]) rather than with "retry": a retry runs the work
// again, and meets the same bound if it takes as long.
func (x *Execution) TxLimitErr() *idem.TxLimitError { return x.limit }

// ExplainTxLimit says what le means for the work, and which setting to
// raise: Options.IdleInTransaction, Options.MaxExecution, or the
// database's own statement timeout (a role's or a connection's), for a log
// or an answer.
func ExplainTxLimit(le *idem.TxLimitError) string {
	switch {
	case le.Limit == idem.TxIdle:
		return fmt.Sprintf("the work paused between two statements for longer than its transaction may stay idle, IdleInTransaction (%v, the database's %s), and the database ended the transaction; raise IdleInTransaction above the work's longest pause", le.Bound, le.Setting)
	case le.Session:
		return fmt.Sprintf("a statement of the work ran longer than the database's own %s for the session (%v, a setting of its role, database or connection), and the database cancelled it; raise that setting", le.Setting, le.Bound)
	}
	return fmt.Sprintf("a statement of the work ran longer than MaxExecution (%v, its %s), and the database cancelled it; raise MaxExecution", le.Bound, le.Setting)
}

// txLimitHit keeps and logs le, the bound at which the database ended the
// claim's transaction: nothing committed, the key is free again, and the
// operator must know which setting to raise. The release is reported
// where the transaction ends (completeTx, rollbackTx), with le as its
// cause.
func (x *Execution) txLimitHit(le *idem.TxLimitError) {
	x.limit = le
	x.e.log(x.logCtx, slog.LevelError, "the database ended the work's transaction, so nothing of it committed and its key is free again: "+ExplainTxLimit(le), x.req,
		slog.String("limit", le.Limit.String()), slog.String("setting", le.Setting), slog.Duration("bound", le.Bound), slog.Any("err", le.Err))
}

// InTransaction reports whether the work runs inside the claim's
// transaction (the request was InTransaction): its writes there commit
// with the recorded result or not at all, so an adapter holds the work's
// answer back until [Execution.Committed] says which.
func (x *Execution) InTransaction() bool { return x.tx != nil }

// TxContext returns ctx carrying the claim's transaction (for a request
// InTransaction; ctx itself otherwise), for work that runs on a context of
// its own rather than on [Execution.Context], such as a go-sdk tool
// handler, which runs on its MCP session's context.
func (x *Execution) TxContext(ctx context.Context) context.Context {
	if x.tx == nil {
		return ctx
	}
	return x.tx.Context(ctx)
}

// Committed reports whether the claim's transaction committed with the
// work's result, once [Execution.Finish] returned (or after a successful
// [Execution.Commit]). An adapter that held the answer back sends it only
// if so, or if the verdict was not to record it (a failure, rolled back);
// a recorded answer that did not commit must not reach the client as a
// success.
func (x *Execution) Committed() bool { return x.committed }

// Commit records res as the work's result in the claim's transaction and
// commits it now, while the work runs, for an adapter that answers only
// once its answer is committed (middleware.Commit). It fails without
// committing if the work's context already ended (the claim can no longer
// be trusted, or Shutdown), and for a claim not taken in a transaction.
// After a nil error the verdict must be [CompletedByWork]; after an error,
// [Release] (the transaction rolled back).
func (x *Execution) Commit(res idem.Result) error {
	if x.tx == nil {
		return errors.New("engine: Commit of a claim not taken in a transaction")
	}
	if err := x.Err(); err != nil {
		return err
	}
	if err := x.commitTx(res); err != nil {
		if le, ok := errors.AsType[*idem.TxLimitError](err); ok {
			x.txLimitHit(le) // the release is reported by Finish
			return err
		}
		x.e.log(x.logCtx, slog.LevelWarn, "the work's transaction did not commit, or the outcome of its commit is unknown (the connection was lost)", x.req, slog.Any("err", err))
		return err
	}
	return nil
}

func (x *Execution) commitTx(res idem.Result) error {
	ctx, cancel := x.storeCtx()
	defer cancel()
	err := x.tx.Commit(ctx, res)
	// Either way the transaction is over: committed, or rolled back.
	x.txEnded, x.committed = true, err == nil
	return err
}

// txVerdict adapts v to a claim in a transaction: there is no lease to
// leave a claim to, so LeaveToLease rolls back (the work's writes go with it, so
// a retry running it again is safe); and a CompletedByWork that did not commit
// (the adapter did not call Commit, or it failed) is a release.
func (x *Execution) txVerdict(v Verdict) Verdict {
	switch {
	case v.Action == LeaveToLease:
		return Verdict{Action: Release, Why: v.Why + "; rolled back, as a claim in a transaction has no lease to leave it to"}
	case v.Action == CompletedByWork && !x.committed:
		return Verdict{Action: Release, Why: "the work's transaction did not commit"}
	}
	return v
}

// completeTx commits the claim's transaction with res (complete, in a
// transaction). A commit is not tried again: a failed one rolled back.
func (x *Execution) completeTx(res idem.Result, ran time.Duration, reportStale bool) {
	err := x.commitTx(res)
	le, _ := errors.AsType[*idem.TxLimitError](err)
	switch {
	case err == nil:
		x.e.observe(x.req, idem.Event{Kind: idem.EventCompleted, Status: res.Status, Duration: ran})
		if res.Unreplayable {
			x.e.log(x.logCtx, slog.LevelInfo, "result not replayable; key completed as unreplayable", x.req, slog.Int("status", res.Status))
		}
	case errors.Is(err, idem.ErrStaleClaim):
		x.stale(err, ran, reportStale)
	case le != nil:
		x.txLimitHit(le)
		x.e.observe(x.req, idem.Event{Kind: idem.EventReleased, Err: le, Status: res.Status, Duration: ran})
	default:
		// Rolled back: nothing of the work committed, and a retry runs it
		// again. The adapter must not answer the work's result.
		x.e.observe(x.req, idem.Event{Kind: idem.EventStoreError, Op: "complete", Err: err, Status: res.Status, Duration: ran})
		x.e.log(x.logCtx, slog.LevelError, "the work's transaction did not commit, or the outcome of its commit is unknown (the connection was lost); unless it did commit, nothing was recorded and its writes rolled back", x.req, slog.Any("err", err))
	}
}

// rollbackTx rolls the claim's transaction back (release, in a
// transaction): the claim and the work's writes are gone.
func (x *Execution) rollbackTx(why string, cause error, ran time.Duration) {
	ctx, cancel := x.storeCtx()
	err := x.tx.Rollback(ctx)
	cancel()
	x.txEnded = true
	if le, ok := errors.AsType[*idem.TxLimitError](err); ok {
		x.txLimitHit(le)
		err = nil
	}
	if err != nil {
		// The connection is closed with the transaction open: PostgreSQL
		// rolls it back when it notices.
		x.e.observe(x.req, idem.Event{Kind: idem.EventStoreError, Op: "release", Err: err, Duration: ran})
		x.e.log(x.logCtx, slog.LevelWarn, "could not roll back the work's transaction ("+why+"); it ends with its connection", x.req, slog.Any("err", err))
		return
	}
	if x.limit != nil {
		// The database ended the transaction (logged when it was seen,
		// here or by an early Commit): that is the release's cause.
		x.e.observe(x.req, idem.Event{Kind: idem.EventReleased, Err: x.limit, Duration: ran})
		return
	}
	x.e.observe(x.req, idem.Event{Kind: idem.EventReleased, Err: cause, Duration: ran})
	x.e.log(x.logCtx, slog.LevelInfo, "rolled back the work's transaction, releasing its key: "+why, x.req)
}

// endTx makes sure the claim's transaction is over once Finish returns,
// whatever path it took.
func (x *Execution) endTx() {
	if x.txEnded {
		return
	}
	ctx, cancel := x.storeCtx()
	_ = x.tx.Rollback(ctx)
	cancel()
	x.txEnded = true
}

// idleTimer is the lease and renewal timer of every claim in a
// transaction, which has no lease: never started, so Stop does nothing,
// and never reset.
var idleTimer = func() *time.Timer {
	t := time.AfterFunc(time.Hour, func() {})
	t.Stop()
	return t
}()
