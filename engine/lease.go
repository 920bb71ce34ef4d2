package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
)

// renew runs on the renewal timer's goroutine.
func (x *Execution) renew() {
	x.mu.Lock()
	if x.finished || x.lost {
		x.mu.Unlock()
		return
	}
	if x.pastDeadline() {
		// The work ran past its deadline and was told to stop: it keeps
		// its claim only until the lease runs out, so a work that never
		// returns cannot hold its key for ever.
		x.mu.Unlock()
		x.e.log(x.logCtx, slog.LevelWarn, "the work ran past its deadline; its idempotency lease is no longer renewed", x.req,
			slog.Duration("ran", time.Since(x.began)))
		return
	}
	// Bounded by the time left on the lease as well as the store timeout:
	// a renewal that hangs must not outlast the claim it renews.
	deadline := time.Now().Add(x.e.storeTimeout)
	if x.leaseEnd.Before(deadline) {
		deadline = x.leaseEnd
	}
	ctx, cancel := context.WithDeadline(x.store, deadline)
	x.stopRenew = cancel
	x.renewing.Add(1)
	x.mu.Unlock()
	defer x.renewing.Done()

	sent := time.Now()
	_, err := x.e.store.Renew(ctx, x.tok, x.e.lease)
	cancel()

	x.mu.Lock()
	x.stopRenew = nil
	if x.finished || x.lost {
		x.mu.Unlock()
		return
	}
	next := x.e.renewEvery
	if err == nil {
		// The store extended the lease from a moment after sent, on its
		// clock: sent plus the lease is again never later than its end.
		if x.leaseTimer.Stop() {
			x.leaseEnd = sent.Add(x.e.lease - x.e.margin)
			x.leaseTimer.Reset(time.Until(x.leaseEnd))
		}
		x.renewTimer.Reset(next)
		x.mu.Unlock()
		return
	}
	left := time.Until(x.leaseEnd)
	x.mu.Unlock()

	if errors.Is(err, idem.ErrStaleClaim) {
		x.lose(err)
		return
	}
	x.e.observe(x.req, idem.Event{Kind: idem.EventStoreError, Op: "renew", Err: err, Duration: time.Since(sent)})
	if left <= 0 {
		return // the lease timer ends the work
	}
	x.e.log(x.logCtx, slog.LevelWarn, "could not renew idempotency lease; retrying", x.req, slog.Any("err", err))
	x.mu.Lock()
	if !x.finished && !x.lost {
		// Half the time left, so that a few more tries fit before the
		// deadline, but never sooner than minRenewRetry: a store that fails
		// at once (a pool that refuses without a round trip) would
		// otherwise be retried in a loop as the time left shrinks to
		// nothing.
		x.renewTimer.Reset(max(min(next, left/2), minRenewRetry))
	}
	x.mu.Unlock()
}

// minRenewRetry is the shortest wait before a failed renewal is tried
// again.
const minRenewRetry = 10 * time.Millisecond

// pastDeadline reports whether the work's deadline has passed.
func (x *Execution) pastDeadline() bool {
	return !x.deadline.IsZero() && !time.Now().Before(x.deadline)
}

// lose cancels the work because its claim can no longer be trusted, and
// reports it once.
func (x *Execution) lose(why error) {
	x.mu.Lock()
	if x.finished || x.lost {
		x.mu.Unlock()
		return
	}
	x.lost, x.lostStale = true, errors.Is(why, idem.ErrStaleClaim)
	x.renewTimer.Stop()
	x.mu.Unlock()
	// Reported before the work is cancelled, so that the loss comes
	// before the release that follows the work's return.
	x.e.observe(x.req, idem.Event{Kind: idem.EventLeaseLost, Err: why, Duration: time.Since(x.began)})
	x.e.log(x.logCtx, slog.LevelWarn, "idempotency claim lost while the work ran; it is cancelled and will not be recorded", x.req, slog.Any("err", why))
	x.cancel(idem.ErrLeaseLost)
}
