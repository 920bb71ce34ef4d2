package engine_test

// The engine's timers under testing/synctest: the lease deadline, the
// renewal schedule, the margin, the wait bound and Retry-After, each at the
// exact instant the package documentation gives, on the bubble's fake
// clock. Nothing here sleeps for real, so none of it flakes on a loaded
// machine; memstore runs on the same fake clock (its default, time.Now).

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/memstore"
)

// timedStore is memstore with its renewals scripted and every call's time
// noted, relative to the bubble's start.
type timedStore struct {
	idem.Store
	start time.Time
	// renew, when set, answers a renewal instead of the store.
	renew func(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error)
	// claimTakes is how long a claim takes (a slow database).
	claimTakes time.Duration

	mu     sync.Mutex
	renews []time.Duration // when each renewal was sent
	ends   []time.Duration // each renewal's context deadline, if any
	calls  []string
}

func newTimedStore() *timedStore {
	return &timedStore{Store: memstore.New(memstore.Options{}), start: time.Now()}
}

func (s *timedStore) since() time.Duration { return time.Since(s.start) }

func (s *timedStore) note(call string) {
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

func (s *timedStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if s.claimTakes > 0 {
		time.Sleep(s.claimTakes)
	}
	return s.Store.Claim(ctx, req)
}

func (s *timedStore) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	s.mu.Lock()
	s.renews = append(s.renews, s.since())
	if d, ok := ctx.Deadline(); ok {
		s.ends = append(s.ends, d.Sub(s.start))
	}
	s.mu.Unlock()
	if s.renew != nil {
		return s.renew(ctx, tok, lease)
	}
	return s.Store.Renew(ctx, tok, lease)
}

func (s *timedStore) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	s.note("complete")
	return s.Store.Complete(ctx, tok, res)
}

func (s *timedStore) Release(ctx context.Context, tok idem.Token) error {
	s.note("release")
	return s.Store.Release(ctx, tok)
}

// hang is a renewal that never answers: it returns when its context ends.
func hang(ctx context.Context, _ idem.Token, _ time.Duration) (time.Time, error) {
	<-ctx.Done()
	return time.Time{}, ctx.Err()
}

// events collects a request's events, with their times relative to start.
type events struct {
	start time.Time
	idemtest.Events
}

// of returns when each event of kind was recorded, relative to start.
func (e *events) of(kind idem.EventKind) []time.Duration {
	var out []time.Duration
	for _, at := range e.At(kind) {
		out = append(out, at.Sub(e.start))
	}
	return out
}

// execute claims key on eng and runs work under the claim, returning when
// the work's context ended (relative to start) and its cause, or zero and
// nil if it did not end while the work ran.
func execute(t *testing.T, eng *engine.Engine, ev *events, work func(ctx context.Context) engine.Verdict) {
	t.Helper()
	k, _ := idem.ParseClientKey("k")
	req := &engine.Request{Claim: idem.ClaimRequest{Key: k}, Observe: ev.Observe}
	d := eng.Claim(t.Context(), req)
	if d.Outcome != engine.Run {
		t.Fatalf("claim: %v (%v), want run", d.Outcome, d.Err)
	}
	eng.Start(t.Context(), req, d).Do(work, nil)
}

// waitEnd is work that waits for its context to end, at most bound, and
// reports when it did (relative to start) and why. Work cut off answers
// nothing to record; work that ran its course answers 200.
func waitEnd(start time.Time, bound time.Duration, ended *time.Duration, cause *error) func(ctx context.Context) engine.Verdict {
	return func(ctx context.Context) engine.Verdict {
		select {
		case <-ctx.Done():
			*ended, *cause = time.Since(start), context.Cause(ctx)
			return engine.Verdict{Action: engine.Release, Why: "cut off"}
		case <-time.After(bound):
		}
		return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 200}}
	}
}

// TestSynctestRenewalSchedule: with a store that answers at once, the lease
// is renewed every third of it, and the work is never cut off however long
// it runs.
func TestSynctestRenewalSchedule(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := newTimedStore()
		ev := &events{start: store.start}
		var ended time.Duration
		var cause error
		execute(t, engine.New(store, engine.Options{Lease: 3 * time.Second}), ev, waitEnd(store.start, 9500*time.Millisecond, &ended, &cause))
		if cause != nil {
			t.Fatalf("the work's context ended at %v (%v), want it to run its 9.5s", ended, cause)
		}
		want := []time.Duration{}
		for i := 1; i <= 9; i++ {
			want = append(want, time.Duration(i)*time.Second)
		}
		if !slices.Equal(store.renews, want) {
			t.Errorf("renewals at %v, want every second: %v", store.renews, want)
		}
		if got := ev.of(idem.EventCompleted); len(got) != 1 || got[0] != 9500*time.Millisecond {
			t.Errorf("completed at %v, want once at 9.5s", got)
		}
	})
}

// TestSynctestLeaseLostWhenRenewalsHang: a renewal that never answers is
// bounded by the lease deadline, the lease end minus min(lease/5, 2s), and
// by the store timeout (10s); the work's context ends exactly at the
// deadline, with cause idem.ErrLeaseLost, one EventLeaseLost is reported,
// and nothing is recorded.
func TestSynctestLeaseLostWhenRenewalsHang(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lease, deadline time.Duration
	}{
		{time.Second, 800 * time.Millisecond},         // margin lease/5
		{5 * time.Second, 4 * time.Second},            // margin lease/5
		{30 * time.Second, 28 * time.Second},          // margin capped at MaxLeaseMargin
		{100 * time.Second, 98 * time.Second},         // the same cap
		{10 * time.Millisecond, 8 * time.Millisecond}, // a short lease scales down
	} {
		t.Run(tc.lease.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newTimedStore()
				store.renew = hang
				ev := &events{start: store.start}
				var ended time.Duration
				var cause error
				execute(t, engine.New(store, engine.Options{Lease: tc.lease}), ev, waitEnd(store.start, 10*tc.lease, &ended, &cause))
				if !errors.Is(cause, idem.ErrLeaseLost) || ended != tc.deadline {
					t.Errorf("the work's context ended at %v (%v), want at %v with idem.ErrLeaseLost", ended, cause, tc.deadline)
				}
				if len(store.renews) == 0 || store.renews[0] != tc.lease/3 {
					t.Errorf("renewals sent at %v, want the first at %v", store.renews, tc.lease/3)
				}
				for i, end := range store.ends {
					if want := min(store.renews[i]+engine.DefaultStoreTimeout, tc.deadline); end != want {
						t.Errorf("the renewal sent at %v was bounded by %v, want %v", store.renews[i], end, want)
					}
				}
				if got := ev.of(idem.EventLeaseLost); len(got) != 1 || got[0] != tc.deadline {
					t.Errorf("lease lost reported at %v, want once at %v", got, tc.deadline)
				}
				if got := ev.of(idem.EventCompleted); len(got) != 0 {
					t.Errorf("completed at %v after the lease was lost", got)
				}
			})
		})
	}
}

// TestSynctestDeadlineFromTheClaimSent: the deadline counts from when the
// claim that acquired was sent, not from when it returned: a claim that
// took 300ms of a 1s lease leaves the work 500ms before the deadline.
func TestSynctestDeadlineFromTheClaimSent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := newTimedStore()
		store.renew, store.claimTakes = hang, 300*time.Millisecond
		ev := &events{start: store.start}
		var ended time.Duration
		var cause error
		execute(t, engine.New(store, engine.Options{Lease: time.Second}), ev, waitEnd(store.start, 10*time.Second, &ended, &cause))
		if !errors.Is(cause, idem.ErrLeaseLost) || ended != 800*time.Millisecond {
			t.Errorf("the work's context ended at %v (%v), want 800ms after the claim was sent, with idem.ErrLeaseLost", ended, cause)
		}
	})
}

// TestSynctestLeaseOverBeforeTheWork: a claim whose answer came after its
// lease (less the margin) had run out (the process stalled between sending
// it and reading the answer) starts its work with the context already
// ended by the lease's loss, not a moment later from a timer: work that
// checks its context first runs nothing.
func TestSynctestLeaseOverBeforeTheWork(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := newTimedStore()
		store.claimTakes = 1500 * time.Millisecond
		ev := &events{start: store.start}
		var atStart error
		ran := false
		execute(t, engine.New(store, engine.Options{Lease: time.Second}), ev, func(ctx context.Context) engine.Verdict {
			if atStart = context.Cause(ctx); atStart != nil {
				return engine.Verdict{Action: engine.Release, Why: "cut off"}
			}
			ran = true
			return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 200}}
		})
		if ran || !errors.Is(atStart, idem.ErrLeaseLost) {
			t.Errorf("the work started with its context's cause %v (ran its effect: %v), want idem.ErrLeaseLost before it started", atStart, ran)
		}
		if lost := ev.of(idem.EventLeaseLost); len(lost) != 1 {
			t.Errorf("lease lost reported at %v, want once", lost)
		}
	})
}

// TestSynctestConfirmedRenewalMovesTheDeadline: each confirmed renewal moves
// the deadline to its own sending plus the lease minus the margin; when the
// renewals start hanging, the work ends at the last confirmed one's.
func TestSynctestConfirmedRenewalMovesTheDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := newTimedStore()
		var n int
		store.renew = func(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
			n++
			if n <= 2 {
				return store.Store.Renew(ctx, tok, lease)
			}
			return hang(ctx, tok, lease)
		}
		ev := &events{start: store.start}
		var ended time.Duration
		var cause error
		execute(t, engine.New(store, engine.Options{Lease: 3 * time.Second}), ev, waitEnd(store.start, time.Minute, &ended, &cause))
		// Renewals at 1s and 2s confirmed; the third, at 3s, hangs; the
		// deadline is 2s + 3s - 600ms.
		if want := 4400 * time.Millisecond; !errors.Is(cause, idem.ErrLeaseLost) || ended != want {
			t.Errorf("the work's context ended at %v (%v), want at %v", ended, cause, want)
		}
		if !slices.Equal(store.renews, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}) {
			t.Errorf("renewals at %v, want 1s, 2s, 3s", store.renews)
		}
	})
}

// TestSynctestFailingRenewalsRetry: a renewal that fails is retried after
// the renewal interval or half the time left, whichever is shorter, until
// the deadline ends the work. Each failure takes a round trip (1ms).
func TestSynctestFailingRenewalsRetry(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := newTimedStore()
		store.renew = func(context.Context, idem.Token, time.Duration) (time.Time, error) {
			time.Sleep(time.Millisecond)
			return time.Time{}, &idem.UnavailableError{Op: "renew", Err: errors.New("connection refused")}
		}
		ev := &events{start: store.start}
		var ended time.Duration
		var cause error
		execute(t, engine.New(store, engine.Options{Lease: 3 * time.Second}), ev, waitEnd(store.start, time.Minute, &ended, &cause))
		if !errors.Is(cause, idem.ErrLeaseLost) || ended != 2400*time.Millisecond {
			t.Errorf("the work's context ended at %v (%v), want at the 2.4s deadline", ended, cause)
		}
		// Deadline 2.4s. The first renewal at 1s fails at 1.001s, 1.399s
		// before it: the next in min(1s, 699.5ms), at 1.7005s; it fails
		// 698.5ms before: the next in 349.25ms, at 2.05075s; and so on, each
		// half as far from the deadline, until one fails after it.
		want := []time.Duration{time.Second, 1700500 * time.Microsecond, 2050750 * time.Microsecond}
		if len(store.renews) < len(want) || !slices.Equal(store.renews[:len(want)], want) {
			t.Errorf("renewals at %v, want them to start %v", store.renews, want)
		}
		if n := len(store.renews); n > 12 {
			t.Errorf("%d renewals before the deadline, want the halving to bound them (about log2(1.4s/1ms))", n)
		}
		for _, at := range store.renews {
			if at >= 2400*time.Millisecond {
				t.Errorf("a renewal sent at %v, after the deadline", at)
			}
		}
		// Each failure is reported, but for one that returns after the
		// deadline, when the loss was reported instead.
		if got := ev.of(idem.EventStoreError); len(got) < len(store.renews)-1 || len(got) > len(store.renews) {
			t.Errorf("%d store errors reported for %d failed renewals", len(got), len(store.renews))
		}
	})
}

// TestSynctestInstantRenewalFailuresDoNotSpin: a store that fails every
// renewal at once (a pool that refuses without a round trip) is retried
// at most every minRenewRetry (10 ms) as the deadline nears, not in a loop.
// Before, the retry came after half the time left, with no floor: the
// last ones came ever faster, and once half of it rounded to nothing, the
// retry timer fired at once, the renewal failed at once, and on the
// bubble's clock, which stands still while anything runs, the retries
// never stopped (the store below gives up failing after 1000 of them).
func TestSynctestInstantRenewalFailuresDoNotSpin(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := newTimedStore()
		var failed int
		store.renew = func(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
			if failed++; failed > 1000 {
				return store.Store.Renew(ctx, tok, lease)
			}
			return time.Time{}, &idem.UnavailableError{Op: "renew", Err: errors.New("pool exhausted")}
		}
		ev := &events{start: store.start}
		var ended time.Duration
		var cause error
		execute(t, engine.New(store, engine.Options{Lease: 3 * time.Second}), ev, waitEnd(store.start, time.Minute, &ended, &cause))
		if !errors.Is(cause, idem.ErrLeaseLost) || ended != 2400*time.Millisecond {
			t.Errorf("the work's context ended at %v (%v), want at the 2.4s deadline", ended, cause)
		}
		// Renewals at 1s, then half the time left before the 2.4s deadline
		// each time (1.7s, 2.05s, ...), until half of it is under 10 ms.
		if n := len(store.renews); n > 12 {
			t.Errorf("%d renewals before the deadline, want about 10: a failure at once must not be retried at once", n)
		}
		for i := 1; i < len(store.renews); i++ {
			if gap := store.renews[i] - store.renews[i-1]; gap < 10*time.Millisecond {
				t.Errorf("renewal %d came %v after the one before, want at least 10ms", i, gap)
				break
			}
		}
	})
}

// TestSynctestStaleRenewalEndsAtOnce: a renewal that finds the claim stale
// (taken over) ends the work at once, not at the deadline, and nothing is
// completed or released.
func TestSynctestStaleRenewalEndsAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := newTimedStore()
		store.renew = func(_ context.Context, tok idem.Token, _ time.Duration) (time.Time, error) {
			return time.Time{}, &idem.StaleClaimError{Token: tok}
		}
		ev := &events{start: store.start}
		var ended time.Duration
		var cause error
		execute(t, engine.New(store, engine.Options{Lease: 3 * time.Second}), ev, waitEnd(store.start, time.Minute, &ended, &cause))
		if !errors.Is(cause, idem.ErrLeaseLost) || ended != time.Second {
			t.Errorf("the work's context ended at %v (%v), want at the 1s renewal", ended, cause)
		}
		if len(store.calls) != 0 {
			t.Errorf("after a stale renewal the engine called %v, want nothing (the key is another owner's)", store.calls)
		}
	})
}

// TestSynctestShutdown: Options.Shutdown ends the work's context at the
// moment it is cancelled, with cause engine.ErrShutdown, and a claim made
// after it is answered Unavailable without reaching the store.
func TestSynctestShutdown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := newTimedStore()
		shutdown, cancel := context.WithCancel(context.Background())
		time.AfterFunc(1500*time.Millisecond, cancel)
		eng := engine.New(store, engine.Options{Lease: 3 * time.Second, Shutdown: shutdown})
		ev := &events{start: store.start}
		var ended time.Duration
		var cause error
		execute(t, eng, ev, waitEnd(store.start, time.Minute, &ended, &cause))
		if !errors.Is(cause, engine.ErrShutdown) || ended != 1500*time.Millisecond {
			t.Errorf("the work's context ended at %v (%v), want at 1.5s with engine.ErrShutdown", ended, cause)
		}
		k, _ := idem.ParseClientKey("later")
		if d := eng.Claim(t.Context(), &engine.Request{Claim: idem.ClaimRequest{Key: k}}); d.Outcome != engine.Unavailable || !errors.Is(d.Err, engine.ErrShutdown) {
			t.Errorf("a claim after shutdown: %v (%v), want unavailable with engine.ErrShutdown", d.Outcome, d.Err)
		}
	})
}

// TestSynctestLeftAfterACutOff: work cut off (Shutdown, its lease lost)
// whose adapter cannot tell whether it answered (Verdict LeaveToLease: mcphttp saw
// the call's stream end without its response, which the tool may yet have
// sent) is left to its lease, not released: a release would let a retry
// run the work again at once, beside or after the work that may have done
// its effect. Before, the engine released any work cut off without a whole
// answer, whatever its verdict said.
func TestSynctestLeftAfterACutOff(t *testing.T) {
	t.Parallel()
	for _, cut := range []string{"shutdown", "lease lost"} {
		t.Run(cut, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newTimedStore()
				opts := engine.Options{Lease: 3 * time.Second}
				if cut == "shutdown" {
					shutdown, cancel := context.WithCancel(context.Background())
					time.AfterFunc(500*time.Millisecond, cancel)
					opts.Shutdown = shutdown
				} else {
					store.renew = hang
				}
				ev := &events{start: store.start}
				execute(t, engine.New(store, opts), ev, func(ctx context.Context) engine.Verdict {
					<-ctx.Done()
					return engine.Verdict{Action: engine.LeaveToLease, Why: "the stream ended without the call's response"}
				})
				if len(store.calls) != 0 {
					t.Errorf("the engine called %v, want nothing: the claim left to its lease", store.calls)
				}
				if got := ev.of(idem.EventLeft); len(got) != 1 {
					t.Errorf("%d EventLeft, want 1", len(got))
				}
			})
		})
	}
}

// TestSynctestWaitAndRetryAfter: a duplicate waits Options.Wait for the
// holder, no longer, then is answered in flight with Retry-After the wait
// a retry would be granted (before any run was recorded), never more than
// the time left on the holder's lease; a holder that completes within the
// wait is replayed at the moment it completes. Once runs were recorded,
// Retry-After is how long they typically ran.
func TestSynctestWaitAndRetryAfter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New(memstore.Options{})
		k, _ := idem.ParseClientKey("held")
		holder, err := store.Claim(t.Context(), idem.ClaimRequest{Key: k, Lease: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		eng := engine.New(store, engine.Options{Lease: 10 * time.Second, Wait: 2 * time.Second})
		start := time.Now()
		d := eng.Claim(t.Context(), &engine.Request{Claim: idem.ClaimRequest{Key: k}})
		if took := time.Since(start); d.Outcome != engine.InFlight || took != 2*time.Second || d.RetryAfter != 2*time.Second {
			t.Errorf("duplicate: %v after %v, Retry-After %v; want in flight after the 2s wait, Retry-After 2s (the wait)", d.Outcome, took, d.RetryAfter)
		}
		time.Sleep(5 * time.Second) // 1s left on the holder's lease after the wait
		if d = eng.Claim(t.Context(), &engine.Request{Claim: idem.ClaimRequest{Key: k}}); d.Outcome != engine.InFlight || d.RetryAfter != time.Second {
			t.Errorf("duplicate near the lease end: %v, Retry-After %v; want in flight, Retry-After 1s (the lease left)", d.Outcome, d.RetryAfter)
		}
		time.Sleep(time.Second) // the holder's lease ran out: it takes its key over
		if holder, err = store.Claim(t.Context(), idem.ClaimRequest{Key: k, Lease: 10 * time.Second}); err != nil || holder.Status != idem.Acquired {
			t.Fatalf("the holder's takeover: %+v, %v", holder, err)
		}

		time.AfterFunc(700*time.Millisecond, func() {
			_ = store.Complete(context.Background(), holder.Token, idem.Result{Status: 201})
		})
		start = time.Now()
		d = eng.Claim(t.Context(), &engine.Request{Claim: idem.ClaimRequest{Key: k}})
		if took := time.Since(start); d.Outcome != engine.Replay || took != 700*time.Millisecond {
			t.Errorf("duplicate of a holder that completes at 700ms: %v after %v, want a replay at 700ms", d.Outcome, took)
		}

		// A run of 3s recorded through the engine: the next duplicate's
		// hint.
		ran, _ := idem.ParseClientKey("ran")
		req := &engine.Request{Claim: idem.ClaimRequest{Key: ran}}
		eng.Start(t.Context(), req, eng.Claim(t.Context(), req)).Do(func(context.Context) engine.Verdict {
			time.Sleep(3 * time.Second)
			return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 200}}
		}, nil)
		held, _ := idem.ParseClientKey("held again")
		if _, err := store.Claim(t.Context(), idem.ClaimRequest{Key: held, Lease: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		if d = eng.Claim(t.Context(), &engine.Request{Claim: idem.ClaimRequest{Key: held}}); d.Outcome != engine.InFlight || d.RetryAfter != 3*time.Second {
			t.Errorf("duplicate after a 3s run: %v, Retry-After %v; want in flight, Retry-After 3s (the typical run)", d.Outcome, d.RetryAfter)
		}
	})
}
