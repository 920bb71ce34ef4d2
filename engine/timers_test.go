package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/memstore"
)

// deadlineEnv is an engine over a memstore with one claimed request, made
// inside a synctest bubble so that leases and deadlines run on its clock.
type deadlineEnv struct {
	store  *memstore.Store
	eng    *engine.Engine
	key    idem.Key
	req    *engine.Request
	d      engine.Decision
	events idemtest.Events
}

func newDeadlineEnv(t *testing.T, opts engine.Options) *deadlineEnv {
	t.Helper()
	e := &deadlineEnv{store: memstore.New(memstore.Options{})}
	e.eng = engine.New(e.store, opts)
	e.key, _ = idem.ParseClientKey("k")
	e.req = &engine.Request{Claim: idem.ClaimRequest{Key: e.key}, Observe: e.events.Observe}
	if e.d = e.eng.Claim(t.Context(), e.req); e.d.Outcome != engine.Run {
		t.Fatalf("claim: %v, want run", e.d.Outcome)
	}
	return e
}

// claimAgain is a retry's claim of the key.
func (e *deadlineEnv) claimAgain(t *testing.T) idem.Claim {
	t.Helper()
	c, err := e.store.Claim(t.Context(), idem.ClaimRequest{Key: e.key, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHungWorkDoesNotHoldItsKeyForever: a work blocked in a call with no
// timeout of its own, which ignores its context, under the default
// options. Its renewals would succeed for ever, and every retry be told the
// key is in flight; the maximum execution time stops them, and once the
// lease ran out a retry takes the key over. The hung work's late answer is
// not recorded over the new owner's claim.
func TestHungWorkDoesNotHoldItsKeyForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newDeadlineEnv(t, engine.Options{})
		hung, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			e.eng.Start(context.Background(), e.req, e.d).Do(func(context.Context) engine.Verdict {
				<-hung
				return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 201, Body: []byte("late")}}
			}, nil)
		}()
		time.Sleep(time.Hour)
		c := e.claimAgain(t)
		close(hung)
		<-done
		if c.Status != idem.Acquired || !c.Takeover {
			t.Fatalf("a retry an hour after the work hung: %v (takeover %v), want the key taken over; events %v", c.Status, c.Takeover, e.events.Kinds())
		}
		if e.events.Count(idem.EventLeaseLost) != 1 || e.events.Count(idem.EventCompleted) != 0 {
			t.Fatalf("events %v, want one lease lost and no completion", e.events.Kinds())
		}
		if err := e.store.Complete(t.Context(), c.Token, idem.Result{Status: 202}); err != nil {
			t.Fatalf("the new owner could not complete: %v", err)
		}
	})
}

// TestWorkKeepsTheRequestsDeadline: the work's context is detached from the
// client's cancellation, but keeps a deadline the service set on the
// request (http.TimeoutHandler, a gateway's): it ends then, and the work,
// which answers a failure, is released at once.
func TestWorkKeepsTheRequestsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newDeadlineEnv(t, engine.Options{Lease: 3 * time.Second})
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		want, _ := ctx.Deadline()
		e.eng.Start(ctx, e.req, e.d).Do(func(ctx context.Context) engine.Verdict {
			if got, ok := ctx.Deadline(); !ok || !got.Equal(want) {
				t.Errorf("the work's deadline is %v (%v), want the request's, %v", got, ok, want)
			}
			select {
			case <-ctx.Done():
				if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), engine.ErrExecutionTimeout) {
					t.Errorf("the work's context ended with %v (cause %v), want DeadlineExceeded (cause ErrExecutionTimeout)", ctx.Err(), context.Cause(ctx))
				}
				if !time.Now().Equal(want) {
					t.Errorf("the work's context ended at %v, want %v", time.Now(), want)
				}
			case <-time.After(time.Hour):
				t.Error("the work's context did not end at the request's deadline")
			}
			return engine.Verdict{Action: engine.Release, Why: "it failed"}
		}, nil)
		if c := e.claimAgain(t); c.Status != idem.Acquired || c.Takeover {
			t.Fatalf("a retry after the deadline: %v (takeover %v), want the key released; events %v", c.Status, c.Takeover, e.events.Kinds())
		}
		if got := e.events.Of(idem.EventReleased); len(got) != 1 || !errors.Is(got[0].Err, engine.ErrExecutionTimeout) {
			t.Fatalf("events %v, want one release with cause ErrExecutionTimeout", e.events.Kinds())
		}
	})
}

// TestMaxExecution: the work's deadline is Options.MaxExecution after it
// started (DefaultMaxExecution for zero), or the request's deadline if that
// comes first; negative means the request's deadline only. Where there is
// one, the work's context reports it and ends then; the work, which
// answers a failure, is released.
func TestMaxExecution(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     time.Duration
		request time.Duration // the request context's timeout; zero: none
		want    time.Duration // zero: no deadline
	}{
		{"default", 0, 0, engine.DefaultMaxExecution},
		{"set", time.Minute, 0, time.Minute},
		{"the request's is earlier", time.Minute, 20 * time.Second, 20 * time.Second},
		{"the request's is later", time.Minute, time.Hour, time.Minute},
		{"none", -1, 0, 0},
		{"none but the request's", -1, time.Hour, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newDeadlineEnv(t, engine.Options{MaxExecution: tc.max})
				ctx := t.Context()
				if tc.request > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.request)
					defer cancel()
				}
				start := time.Now()
				e.eng.Start(ctx, e.req, e.d).Do(func(ctx context.Context) engine.Verdict {
					got, ok := ctx.Deadline()
					switch {
					case tc.want == 0 && ok:
						t.Errorf("the work's context has a deadline %v after it started, want none", got.Sub(start))
					case tc.want != 0 && (!ok || got.Sub(start) != tc.want):
						t.Errorf("the work's deadline is %v after it started (%v), want %v", got.Sub(start), ok, tc.want)
					}
					select {
					case <-ctx.Done():
						if ran := time.Since(start); ran != tc.want || !errors.Is(context.Cause(ctx), engine.ErrExecutionTimeout) {
							t.Errorf("the work's context ended after %v with cause %v, want %v and ErrExecutionTimeout", ran, context.Cause(ctx), tc.want)
						}
					case <-time.After(2 * time.Hour):
						if tc.want != 0 {
							t.Error("the work's context did not end at its deadline")
						}
					}
					return engine.Verdict{Action: engine.Release, Why: "it failed"}
				}, nil)
				if c := e.claimAgain(t); c.Status != idem.Acquired {
					t.Fatalf("a retry: %v, want the key released; events %v", c.Status, e.events.Kinds())
				}
			})
		})
	}
}

// TestWorkPastItsDeadlineFinishes: a work that ignores its deadline and
// still answers whole before the lease runs out is recorded (its side
// effect happened), and the renewals stopped at the deadline.
func TestWorkPastItsDeadlineFinishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &countRenew{Store: memstore.New(memstore.Options{})}
		eng := engine.New(store, engine.Options{Lease: 30 * time.Second, MaxExecution: time.Minute})
		k, _ := idem.ParseClientKey("k")
		var events idemtest.Events
		req := &engine.Request{Claim: idem.ClaimRequest{Key: k}, Observe: events.Observe}
		d := eng.Claim(t.Context(), req)
		eng.Start(t.Context(), req, d).Do(func(ctx context.Context) engine.Verdict {
			<-ctx.Done()
			before := store.n.Load()
			time.Sleep(15 * time.Second) // finishing its charge; within the lease
			if n := store.n.Load() - before; n != 0 {
				t.Errorf("%d renewals after the deadline, want none", n)
			}
			return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 201, Body: []byte(`{"charge":1}`)}}
		}, nil)
		c, err := store.Claim(t.Context(), idem.ClaimRequest{Key: k})
		if err != nil || c.Status != idem.Completed || string(c.Result.Body) != `{"charge":1}` {
			t.Fatalf("a retry: %v %q %v, want the charge replayed; events %v", c.Status, c.Result.Body, err, events.Kinds())
		}
	})
}

// countRenew counts renewals.
type countRenew struct {
	idem.Store
	n atomic.Int64
}

func (s *countRenew) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	s.n.Add(1)
	return s.Store.Renew(ctx, tok, lease)
}

// flakyComplete fails a store's first fails completions with an
// unavailable error (a connection blip). With committed, each failed one
// took effect first: the answer was lost on its way back.
type flakyComplete struct {
	idem.Store
	fails     int64
	committed bool
	calls     atomic.Int64
}

func (s *flakyComplete) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	if s.calls.Add(1) > s.fails {
		return s.Store.Complete(ctx, tok, res)
	}
	if s.committed {
		if err := s.Store.Complete(ctx, tok, res); err != nil {
			return err
		}
	}
	return &idem.UnavailableError{Op: "complete", Err: errors.New("read: connection reset by peer")}
}

// TestCompleteRetried: a completion that fails with a transient store
// error after the work ran is tried again, within Options.StoreTimeout
// (the generation makes that safe): the result is recorded and a retry
// replays it, instead of running the work again once the lease ran out. A
// completion whose first attempt committed although it reported failure
// is reported completed, not stale. A store that stays down is given up
// on at the lease's end (30 s, less the margin), the later of the two
// bounds here (TestCompleteRetriedThroughAFailover says why).
func TestCompleteRetried(t *testing.T) {
	const storeTimeout = 10 * time.Second
	for _, tc := range []struct {
		name      string
		fails     int64
		committed bool
		want      idem.EventKind
	}{
		{"two blips", 2, false, idem.EventCompleted},
		{"the first attempt committed, its answer lost", 1, true, idem.EventCompleted},
		{"down for good", 1 << 40, false, idem.EventStoreError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &flakyComplete{Store: memstore.New(memstore.Options{}), fails: tc.fails, committed: tc.committed}
				eng := engine.New(store, engine.Options{StoreTimeout: storeTimeout})
				k, _ := idem.ParseClientKey("k")
				var events idemtest.Events
				req := &engine.Request{Claim: idem.ClaimRequest{Key: k}, Observe: events.Observe}
				d := eng.Claim(t.Context(), req)
				var returned time.Time
				eng.Start(t.Context(), req, d).Do(func(context.Context) engine.Verdict {
					returned = time.Now()
					return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 201, Body: []byte(`{"charge":1}`)}}
				}, nil)
				took := time.Since(returned)
				if kinds := events.Kinds(); len(kinds) != 2 || kinds[1] != tc.want.String() {
					t.Fatalf("events %v after %d completion attempts, want claimed, %v", kinds, store.calls.Load(), tc.want)
				}
				if tc.want == idem.EventStoreError {
					if n := store.calls.Load(); n < 3 || took < storeTimeout || took > idem.DefaultLease {
						t.Fatalf("%d attempts over %v, want several, given up within the lease (%v), after StoreTimeout (%v)",
							n, took, idem.DefaultLease, storeTimeout)
					}
					return
				}
				c, err := store.Claim(t.Context(), idem.ClaimRequest{Key: k})
				if err != nil || c.Status != idem.Completed || string(c.Result.Body) != `{"charge":1}` {
					t.Fatalf("a retry: %v %q %v, want the charge replayed", c.Status, c.Result.Body, err)
				}
			})
		})
	}
}

// TestCompleteRetriedThroughAFailover: the store is gone for 15 s after
// the work answered (a Patroni failover: the leader key's ttl, the
// promotion, a proxy's health checks took 10 to 16 s in integration/ha),
// longer than StoreTimeout (10 s) but within the lease (30 s). Nobody can
// take the key over before the lease ends, so the completion is tried
// until then: the answer the client got is recorded, and a retry replays
// it instead of running the work a second time. Each attempt is still
// bounded by StoreTimeout.
func TestCompleteRetriedThroughAFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &teststore.CompleteFailsUntil{Store: memstore.New(memstore.Options{})}
		eng := engine.New(store, engine.Options{Lease: 30 * time.Second, StoreTimeout: 10 * time.Second})
		k, _ := idem.ParseClientKey("k")
		var events idemtest.Events
		req := &engine.Request{Claim: idem.ClaimRequest{Key: k}, Observe: events.Observe}
		d := eng.Claim(t.Context(), req)
		eng.Start(t.Context(), req, d).Do(func(context.Context) engine.Verdict {
			store.Up = time.Now().Add(15 * time.Second)
			return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 201, Body: []byte(`{"charge":1}`)}}
		}, nil)
		if kinds := events.Kinds(); len(kinds) != 2 || kinds[1] != idem.EventCompleted.String() {
			t.Fatalf("events %v after %d completion attempts, want claimed, completed", kinds, store.Attempts.Load())
		}
		c, err := store.Claim(t.Context(), idem.ClaimRequest{Key: k})
		if err != nil || c.Status != idem.Completed || string(c.Result.Body) != `{"charge":1}` {
			t.Fatalf("a retry: %v %q %v, want the charge replayed", c.Status, c.Result.Body, err)
		}
	})
}
