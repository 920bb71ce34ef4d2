package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/memstore"
)

func TestNewPanics(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	for name, opts := range map[string]engine.Options{
		"negative lease":        {Lease: -time.Second},
		"sub-millisecond lease": {Lease: time.Microsecond},
		"negative timeout":      {StoreTimeout: -time.Second},
		"negative retry after":  {RetryAfter: -time.Second},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: New did not panic", name)
				}
			}()
			engine.New(store, opts)
		}()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("New(nil store) did not panic")
			}
		}()
		engine.New(nil, engine.Options{})
	}()
}

// TestForAdapter: an adapter's options come back with every default
// applied, its own default Wait for zero, and the panics of New, naming the
// field.
func TestForAdapter(t *testing.T) {
	t.Parallel()
	o := engine.Options{}.ForAdapter("http", 5*time.Second)
	if o.Lease != idem.DefaultLease || o.Wait != 5*time.Second || o.StoreTimeout != engine.DefaultStoreTimeout ||
		o.RetryAfter != engine.DefaultRetryAfter || o.MaxExecution != engine.DefaultMaxExecution ||
		o.IdleInTransaction != engine.DefaultMaxExecution || o.Logger == nil || o.Adapter != "http" {
		t.Fatalf("defaults: %+v", o)
	}
	if o := (engine.Options{Wait: -1}).ForAdapter("http", 5*time.Second); o.Wait != 0 {
		t.Errorf("a negative Wait gave %v, want no wait", o.Wait)
	}
	if o := (engine.Options{Wait: time.Second, Lease: time.Minute}).ForAdapter("http", 5*time.Second); o.Wait != time.Second || o.Lease != time.Minute {
		t.Errorf("set values not kept: %+v", o)
	}
	for field, o := range map[string]engine.Options{
		"Lease":             {Lease: -time.Second},
		"StoreTimeout":      {StoreTimeout: -1},
		"RetryAfter":        {RetryAfter: -1},
		"IdleInTransaction": {IdleInTransaction: -1},
		"Lease ":            {Lease: time.Microsecond},
	} {
		func() {
			defer func() {
				if p, _ := recover().(string); !strings.HasPrefix(p, "engine: Options."+strings.TrimSpace(field)) {
					t.Errorf("%s: panic %q", field, p)
				}
			}()
			o.ForAdapter("http", time.Second)
		}()
	}
}

// fixedStore answers every claim with claim, err.
type fixedStore struct {
	idem.Store
	claim idem.Claim
	err   error
}

func (s fixedStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return s.claim, s.err
}

// TestRetryAfter: the one Retry-After policy of both adapters.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	const lease = 10 * time.Second
	k, _ := idem.ParseClientKey("k")
	for _, tc := range []struct {
		name     string
		claim    idem.Claim
		err      error
		outcome  engine.Outcome
		min, max time.Duration
	}{
		{"in flight, lease end known", idem.Claim{Status: idem.InFlight, LeaseEnd: time.Now().Add(4 * time.Second)}, nil, engine.InFlight, 3 * time.Second, 4 * time.Second},
		{"in flight, lease end far off (skewed clock)", idem.Claim{Status: idem.InFlight, LeaseEnd: time.Now().Add(time.Hour)}, nil, engine.InFlight, lease, lease},
		{"in flight, lease end past", idem.Claim{Status: idem.InFlight, LeaseEnd: time.Now().Add(-time.Hour)}, nil, engine.InFlight, engine.MinRetryAfter, engine.MinRetryAfter},
		{"in flight, lease end unknown", idem.Claim{Status: idem.InFlight}, nil, engine.InFlight, 7 * time.Second, 7 * time.Second},
		{"unavailable with a hint", idem.Claim{}, &idem.UnavailableError{Op: "claim", Err: errors.New("x"), RetryAfter: 2500 * time.Millisecond}, engine.Unavailable, 2500 * time.Millisecond, 2500 * time.Millisecond},
		{"unavailable without", idem.Claim{}, errors.New("connection refused"), engine.Unavailable, 7 * time.Second, 7 * time.Second},
		{"full", idem.Claim{}, idem.ErrCapacity, engine.Unavailable, 7 * time.Second, 7 * time.Second},
		{"mismatch", idem.Claim{}, &idem.MismatchError{}, engine.Mismatch, 0, 0},
		{"invalid key", idem.Claim{}, &idem.InvalidKeyError{Reason: "long"}, engine.InvalidKey, 0, 0},
	} {
		eng := engine.New(fixedStore{claim: tc.claim, err: tc.err}, engine.Options{Lease: lease, RetryAfter: 7 * time.Second})
		d := eng.Claim(t.Context(), &engine.Request{Claim: idem.ClaimRequest{Key: k}})
		if d.Outcome != tc.outcome || d.RetryAfter < tc.min || d.RetryAfter > tc.max {
			t.Errorf("%s: %v after %v, want %v after %v..%v", tc.name, d.Outcome, d.RetryAfter, tc.outcome, tc.min, tc.max)
		}
	}
}

// TestGoneClient: a client that left while its duplicate waited gets no
// answer and no event.
func TestGoneClient(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	k, _ := idem.ParseClientKey("k")
	if _, err := store.Claim(t.Context(), idem.ClaimRequest{Key: k, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	eng := engine.New(store, engine.Options{Wait: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	var events idemtest.Events
	d := eng.Claim(ctx, &engine.Request{Claim: idem.ClaimRequest{Key: k}, Observe: events.Observe})
	if d.Outcome != engine.RequestEnded || len(events.All()) != 0 {
		t.Fatalf("%v with events %v, want gone and none", d.Outcome, events.Kinds())
	}
}

// TestPanics: a panic releases (and goes on); http.ErrAbortHandler takes
// the adapter's verdict.
func TestPanics(t *testing.T) {
	t.Parallel()
	k, _ := idem.ParseClientKey("k")
	for _, tc := range []struct {
		name    string
		p       any
		aborted func() engine.Verdict
		want    idem.EventKind
	}{
		{"panic", "boom", func() engine.Verdict { return engine.Verdict{Action: engine.Complete} }, idem.EventReleased},
		{"abort, whole", http.ErrAbortHandler, func() engine.Verdict {
			return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 201}}
		}, idem.EventCompleted},
		{"abort, no verdict", http.ErrAbortHandler, nil, idem.EventReleased},
	} {
		eng := engine.New(memstore.New(memstore.Options{}), engine.Options{})
		var got []idem.EventKind
		req := &engine.Request{Claim: idem.ClaimRequest{Key: k}, Observe: func(e idem.Event) { got = append(got, e.Kind) }}
		d := eng.Claim(t.Context(), req)
		func() {
			defer func() {
				if p := recover(); p != tc.p {
					t.Errorf("%s: Do panicked with %v, want %v", tc.name, p, tc.p)
				}
			}()
			eng.Start(context.Background(), req, d).Do(func(context.Context) engine.Verdict { panic(tc.p) }, tc.aborted)
		}()
		if len(got) != 2 || got[1] != tc.want {
			t.Errorf("%s: events %v, want claimed then %v", tc.name, got, tc.want)
		}
	}
}

// TestLeaseFromTheClaimThatAcquired: a duplicate that waited longer than
// the lease for the holder, then acquired, has a whole lease: the deadline
// counts from the claim that acquired, not from the first.
func TestLeaseFromTheClaimThatAcquired(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	store := memstore.New(memstore.Options{})
	k, _ := idem.ParseClientKey("k")
	holder, err := store.Claim(t.Context(), idem.ClaimRequest{Key: k, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(2*lease, func() { store.Release(context.Background(), holder.Token) })

	eng := engine.New(store, engine.Options{Lease: lease, Wait: time.Minute})
	var kinds []idem.EventKind
	req := &engine.Request{Claim: idem.ClaimRequest{Key: k}, Observe: func(e idem.Event) { kinds = append(kinds, e.Kind) }}
	d := eng.Claim(t.Context(), req)
	if d.Outcome != engine.Run {
		t.Fatalf("outcome %v, want run", d.Outcome)
	}
	eng.Start(t.Context(), req, d).Do(func(ctx context.Context) engine.Verdict {
		select {
		case <-ctx.Done():
			t.Errorf("the work's context ended (%v) right after a waited claim acquired", context.Cause(ctx))
		case <-time.After(lease / 4):
		}
		return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 200}}
	}, nil)
	if len(kinds) != 2 || kinds[1] != idem.EventCompleted {
		t.Fatalf("events %v, want claimed, completed", kinds)
	}
}

// TestShutdownAsTheWorkReturns: Shutdown fires just as the work returns a
// whole answer to record. Whether the shutdown's cancellation reaches the
// work's context before the execution ends or not, the outcome is the
// same: the answer is recorded.
func TestShutdownAsTheWorkReturns(t *testing.T) {
	t.Parallel()
	for i := range 50 {
		shutdown, stop := context.WithCancel(context.Background())
		store := memstore.New(memstore.Options{})
		eng := engine.New(store, engine.Options{Shutdown: shutdown})
		k, _ := idem.ParseClientKey(fmt.Sprintf("k%d", i))
		var kinds []idem.EventKind
		req := &engine.Request{Claim: idem.ClaimRequest{Key: k}, Observe: func(e idem.Event) { kinds = append(kinds, e.Kind) }}
		d := eng.Claim(t.Context(), req)
		eng.Start(t.Context(), req, d).Do(func(ctx context.Context) engine.Verdict {
			stop()
			if i%2 == 0 {
				<-ctx.Done() // the cancellation arrived before the work returned
			}
			return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: 201, Body: []byte(`{"charge":1}`)}}
		}, nil)
		stop()
		if len(kinds) != 2 || kinds[1] != idem.EventCompleted {
			t.Fatalf("iteration %d: events %v, want claimed, completed", i, kinds)
		}
	}
}
