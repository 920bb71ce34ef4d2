package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
)

// waitResult is one configuration of the wait mode: how long a completion
// takes (Complete's call to its return: the commit) and how long after the
// commit a waiter wakes, with instances stores (each its own pool and LISTEN
// connection, as separate processes would have) and waiters waiters per key.
type waitResult struct {
	instances, waiters int
	// onetx: the one-commit path (pgstore.BeginClaim): the key is claimed
	// in the holder's transaction and its waiters wait in PostgreSQL on
	// the key's row; clients is how many keys were in flight at once (each
	// waiter holds a connection while it waits).
	onetx    bool
	clients  int
	keys     int
	complete []time.Duration
	wake     []time.Duration
	errors   int
	firstErr error
}

// runWait measures every (instances, waiters) configuration for
// -duration each. Each of -concurrency clients loops: claim a new key on one
// instance; start the key's waiters on the instances in turn (each claims,
// sees the claim in flight, and waits as idem.ClaimWait does); once the row
// is marked as waited on (and a moment more, so that every waiter is
// blocked), complete; each waiter records the time from Complete's return
// (the commit acknowledged) to the return of the Wait after which its claim
// found the result, or zero if it woke before the completer heard back.
func (b *bench) runWait(ctx context.Context, stderr io.Writer) ([]waitResult, error) {
	var out []waitResult
	for _, n := range b.cfg.instances {
		stores := []*pgstore.Store{b.store}
		for range n - 1 {
			pool, err := pgxpool.NewWithConfig(ctx, b.pool.Config())
			if err != nil {
				return nil, err
			}
			defer pool.Close()
			s, err := pgstore.New(pool, storeOptions(b.cfg, b.table))
			if err != nil {
				return nil, err
			}
			defer s.Close()
			stores = append(stores, s)
		}
		for _, onetx := range []bool{false, true} {
			for _, w := range b.cfg.waiters {
				if onetx && w == 0 {
					continue // a commit nobody waits for is the demo-onetx mode's
				}
				fmt.Fprintf(stderr, "idembench: wait: %d instance(s), %d waiter(s) per key, one commit %v ...\n", n, w, onetx)
				r := b.measureWait(ctx, stores, w, onetx)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if r.errors > 0 {
					return nil, fmt.Errorf("%d instance(s), %d waiter(s), one commit %v: %d keys failed; first: %w", n, w, onetx, r.errors, r.firstErr)
				}
				out = append(out, r)
			}
		}
	}
	return out, nil
}

func (b *bench) measureWait(ctx context.Context, stores []*pgstore.Store, waiters int, onetx bool) waitResult {
	r := waitResult{instances: len(stores), waiters: waiters, onetx: onetx, clients: b.cfg.concurrency}
	once := b.waitOnce
	if onetx {
		// Each key's holder and waiters hold a connection each: no more
		// keys at once than the pools have room for.
		r.clients = max(1, min(b.cfg.concurrency, len(stores)*b.cfg.poolConns/(waiters+1)))
		once = b.waitOnceTx
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	deadline := time.Now().Add(b.cfg.duration)
	for c := range r.clients {
		wg.Go(func() {
			w := &worker{id: c}
			for ctx.Err() == nil && time.Now().Before(deadline) {
				complete, wake, err := once(ctx, stores, w, waiters)
				mu.Lock()
				if err != nil {
					r.errors++
					if r.firstErr == nil {
						r.firstErr = err
					}
				} else {
					r.keys++
					r.complete = append(r.complete, complete)
					r.wake = append(r.wake, wake...)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return r
}

// waitOnce runs one key: claim, waiters, complete.
func (b *bench) waitOnce(ctx context.Context, stores []*pgstore.Store, w *worker, waiters int) (time.Duration, []time.Duration, error) {
	k := b.newKey(fmt.Sprintf("%s-%d-%d", modeWait, len(stores), waiters), w)
	key, err := idem.ParseClientKey(k)
	if err != nil {
		return 0, nil, err
	}
	owner := stores[w.id%len(stores)]
	// Wait: a new key's claim may wait a moment for a lock that is not
	// the key's (the table's extension under load); without a Wait such a
	// wait runs out after a millisecond and reads as the key in flight.
	req := idem.ClaimRequest{Scope: "idembench", Key: key, Fingerprint: benchFingerprint, Owner: "idembench", Lease: time.Minute, Wait: time.Minute}
	c, err := owner.Claim(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	if c.Status != idem.Acquired {
		return 0, nil, fmt.Errorf("claim of a new key: %v", c.Status)
	}
	woke := make(chan time.Time, waiters)
	errc := make(chan error, waiters)
	for i := range waiters {
		s := stores[(w.id+i+1)%len(stores)]
		go func() {
			// idem.ClaimWait's loop, timing the wake that ended it (not
			// the claim that follows, which queues for a connection).
			var wake time.Time
			for {
				c, err := s.Claim(ctx, req)
				if err != nil || c.Status == idem.Completed {
					errc <- err
					woke <- wake
					return
				}
				if c.Status != idem.InFlight {
					errc <- fmt.Errorf("waiter: %v, want in flight or completed", c.Status)
					woke <- wake
					return
				}
				if err := s.Wait(ctx, req.Scope, req.Key); err != nil {
					errc <- err
					woke <- wake
					return
				}
				wake = time.Now()
			}
		}()
	}
	if waiters > 0 {
		if err := b.awaitMark(ctx, k); err != nil {
			return 0, nil, err
		}
		// The first waiter marked the row; give the others a moment to
		// reach their wait too.
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	if err := owner.Complete(ctx, c.Token, recordedResult); err != nil {
		return 0, nil, err
	}
	committed := time.Now()
	wakes := make([]time.Duration, 0, waiters)
	for range waiters {
		if err := <-errc; err != nil {
			return 0, nil, err
		}
		wakes = append(wakes, max((<-woke).Sub(committed), 0))
	}
	return committed.Sub(start), wakes, nil
}

// waitOnceTx runs one key of the one-commit path: the holder claims it in
// a transaction (pgstore.BeginClaim); its waiters, on the instances in
// turn, claim it in transactions of their own and wait in PostgreSQL for
// the holder's; once all of them wait (pg_locks), the holder commits with
// the result. Each waiter records the time from the holder's Commit
// returning to its own BeginClaim returning the result.
func (b *bench) waitOnceTx(ctx context.Context, stores []*pgstore.Store, w *worker, waiters int) (time.Duration, []time.Duration, error) {
	k := b.newKey(fmt.Sprintf("%s-onetx-%d-%d", modeWait, len(stores), waiters), w)
	key, err := idem.ParseClientKey(k)
	if err != nil {
		return 0, nil, err
	}
	owner := stores[w.id%len(stores)]
	req := idem.ClaimRequest{Scope: "idembench", Key: key, Fingerprint: benchFingerprint, Owner: "idembench", Lease: time.Minute}
	limits := idem.TxLimits{Wait: time.Minute}
	c, tx, err := owner.BeginClaim(ctx, req, limits)
	if err != nil {
		return 0, nil, err
	}
	if c.Status != idem.Acquired {
		return 0, nil, fmt.Errorf("claim of a new key: %v", c.Status)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var pid int32
	if err := pgstore.TxFrom(tx.Context(ctx)).QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return 0, nil, err
	}
	type wake struct {
		at  time.Time
		err error
	}
	woke := make(chan wake, waiters)
	for i := range waiters {
		s := stores[(w.id+i+1)%len(stores)]
		go func() {
			c, wtx, err := s.BeginClaim(ctx, req, limits)
			at := time.Now()
			switch {
			case err != nil:
			case wtx != nil:
				_ = wtx.Rollback(ctx)
				err = fmt.Errorf("waiter: %v, want completed", c.Status)
			case c.Status != idem.Completed:
				err = fmt.Errorf("waiter: %v, want completed", c.Status)
			}
			woke <- wake{at, err}
		}()
	}
	if waiters > 0 {
		if err := b.awaitLockWaiters(ctx, pid, waiters); err != nil {
			return 0, nil, err
		}
	}
	start := time.Now()
	if err := tx.Commit(ctx, recordedResult); err != nil {
		return 0, nil, err
	}
	committed := time.Now()
	wakes := make([]time.Duration, 0, waiters)
	var first error
	for range waiters {
		wk := <-woke
		if wk.err != nil && first == nil {
			first = wk.err
		}
		wakes = append(wakes, max(wk.at.Sub(committed), 0))
	}
	return committed.Sub(start), wakes, first
}

// awaitLockWaiters polls until n sessions wait for a lock the session pid
// holds: the waiters of the one-commit path, blocked on the key's lock
// until that session's transaction ends.
func (b *bench) awaitLockWaiters(ctx context.Context, pid int32, n int) error {
	q := `SELECT count(*) FROM pg_locks WHERE NOT granted AND $1::integer = ANY (pg_blocking_pids(pid))`
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(time.Millisecond) {
		var waiting int
		if err := b.monitor.QueryRow(ctx, q, pid).Scan(&waiting); err != nil {
			return err
		}
		if waiting >= n {
			return nil
		}
	}
	return fmt.Errorf("%d waiters did not all wait for the session %d within 30s", n, pid)
}

// awaitMark polls until a waiter marked key's row (pgstore's Wait does when
// it finds the claim live).
func (b *bench) awaitMark(ctx context.Context, key string) error {
	q := `SELECT waited FROM ` + b.table + ` WHERE scope = 'idembench' AND key = $1`
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(time.Millisecond) {
		var marked bool
		if err := b.pool.QueryRow(ctx, q, "key/"+key).Scan(&marked); err != nil {
			return err
		}
		if marked {
			return nil
		}
	}
	return errors.New("no waiter marked the row within 30s")
}

func printWait(w io.Writer, rs []waitResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tinstances\twaiters/key\tkeys at once\tkeys\tcomplete p50\tcomplete p99\twake p50\twake p99\t")
	for _, r := range rs {
		wake50, wake99 := "-", "-"
		if r.waiters > 0 {
			wake50, wake99 = fmtDur(percentile(r.wake, 0.50)), fmtDur(percentile(r.wake, 0.99))
		}
		path := "two-phase"
		if r.onetx {
			path = "one-commit"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n", path, r.instances, r.waiters, r.clients, r.keys,
			fmtDur(percentile(r.complete, 0.50)), fmtDur(percentile(r.complete, 0.99)), wake50, wake99)
	}
	tw.Flush()
}
