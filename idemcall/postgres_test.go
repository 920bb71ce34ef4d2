package idemcall_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemcall"
	"github.com/idemkit/idem/internal/doortest"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/pgstore"
)

// kit is a migrated schema with a shipments table and a store on it.
type kit struct{ *teststore.Kit }

func newKit(t *testing.T) *kit {
	t.Helper()
	return &kit{teststore.NewKit(t, pgstore.Options{PollInterval: 50 * time.Millisecond},
		`CREATE TABLE shipments (id bigserial PRIMARY KEY, order_ref text NOT NULL)`)}
}

func (k *kit) shipments(t *testing.T) int { return k.Count(t, "shipments") }

// ship writes a shipment through the claim's transaction (in-transaction
// path) or the pool (two-phase), and returns its id.
func (k *kit) ship(ctx context.Context, order string) (int64, error) {
	var id int64
	const insert = `INSERT INTO shipments (order_ref) VALUES ($1) RETURNING id`
	if tx := pgstore.TxFrom(ctx); tx != nil {
		return id, tx.QueryRow(ctx, insert, order).Scan(&id)
	}
	return id, k.Pool.QueryRow(ctx, insert, order).Scan(&id)
}

// TestConcurrentCallsRunOnce: many callers of one key at once, on both
// paths and both stores, run the function once and all get its value.
func TestConcurrentCallsRunOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range doortest.Paths {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			var store idem.Store = memstore.New(memstore.Options{})
			var k *kit
			if tc.Postgres {
				k = newKit(t)
				store = k.Store
			}
			caller := idemcall.New(store, idemcall.Options{InTransaction: tc.InTx, Engine: engine.Options{Wait: 30 * time.Second}})
			var runs atomic.Int64
			const callers = 8
			values := make([]int64, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					v, _, err := idemcall.Do(t.Context(), caller, idemcall.Call{Scope: "orders", Key: "order-42"}, func(ctx context.Context) (int64, error) {
						runs.Add(1)
						time.Sleep(20 * time.Millisecond) // the others arrive while it runs
						if k == nil {
							return 42, nil
						}
						return k.ship(ctx, "order-42")
					})
					if err != nil {
						t.Errorf("caller %d: %v", i, err)
					}
					values[i] = v
				})
			}
			wg.Wait()
			if n := runs.Load(); n != 1 {
				t.Errorf("the function ran %d times, want 1", n)
			}
			for i, v := range values {
				if v != values[0] || v == 0 {
					t.Errorf("caller %d got %d, caller 0 %d", i, v, values[0])
				}
			}
			if k != nil {
				if n := k.shipments(t); n != 1 {
					t.Errorf("%d shipments, want 1", n)
				}
			}
		})
	}
}

// TestInTransactionRollsBackAFailure: on the one-commit path a function
// that fails after writing leaves no row and no record; the next call runs
// it again, and its row commits with the value that later calls replay.
func TestInTransactionRollsBackAFailure(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	caller := idemcall.New(k.Store, idemcall.Options{InTransaction: true})
	call := idemcall.Call{Key: "order-43", Fingerprint: idemcall.Fingerprint([]byte("order-43"))}
	carrierDown := errors.New("the carrier is down")
	_, _, err := idemcall.Do(k.Ctx, caller, call, func(ctx context.Context) (int64, error) {
		if _, err := k.ship(ctx, "order-43"); err != nil {
			return 0, err
		}
		return 0, carrierDown
	})
	if !errors.Is(err, carrierDown) {
		t.Fatalf("first call: %v, want the function's error", err)
	}
	if n := k.shipments(t); n != 0 {
		t.Fatalf("%d shipments after the failed call, want 0 (rolled back)", n)
	}
	id, replayed, err := idemcall.Do(k.Ctx, caller, call, func(ctx context.Context) (int64, error) { return k.ship(ctx, "order-43") })
	if err != nil || replayed {
		t.Fatalf("second call: %d %v %v", id, replayed, err)
	}
	again, replayed, err := idemcall.Do(k.Ctx, caller, call, func(ctx context.Context) (int64, error) {
		t.Error("a completed key ran its function")
		return 0, nil
	})
	if err != nil || !replayed || again != id {
		t.Fatalf("third call: %d %v %v, want %d replayed", again, replayed, err, id)
	}
	call.Fingerprint = idemcall.Fingerprint([]byte("order-44"))
	_, _, err = idemcall.Do(k.Ctx, caller, call, func(ctx context.Context) (int64, error) { return k.ship(ctx, "order-44") })
	var mismatch *idem.MismatchError
	if !errors.As(err, &mismatch) || !mismatch.Completed {
		t.Fatalf("another input under the key: %v, want a *idem.MismatchError of a completed key", err)
	}
	if n := k.shipments(t); n != 1 {
		t.Errorf("%d shipments, want 1", n)
	}
}

// TestInTransactionCommitFails: a function that leaves its transaction
// idle past IdleInTransaction loses it to PostgreSQL; Do reports a
// *CommitError naming the bound instead of the value, and nothing of the
// call stays.
func TestInTransactionCommitFails(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	const idle = 300 * time.Millisecond
	caller := idemcall.New(k.Store, idemcall.Options{InTransaction: true, Engine: engine.Options{IdleInTransaction: idle}})
	_, _, err := idemcall.Do(k.Ctx, caller, idemcall.Call{Key: "slow"}, func(ctx context.Context) (int64, error) {
		id, err := k.ship(ctx, "slow")
		// Idle for a real duration: PostgreSQL's
		// idle_in_transaction_session_timeout ends the transaction.
		time.Sleep(3 * idle)
		return id, err
	})
	var ce *idemcall.CommitError
	if !errors.As(err, &ce) || !errors.Is(err, idemcall.ErrNotCommitted) || ce.Limit == nil || ce.Limit.Limit != idem.TxIdle {
		t.Fatalf("Do: %v, want a *CommitError at the idle bound", err)
	}
	if n := k.shipments(t); n != 0 {
		t.Errorf("%d shipments, want 0", n)
	}
	v, replayed, err := idemcall.Do(k.Ctx, caller, idemcall.Call{Key: "slow"}, func(ctx context.Context) (int64, error) { return k.ship(ctx, "slow") })
	if err != nil || replayed || v == 0 {
		t.Errorf("retry: %d %v %v, want a fresh run", v, replayed, err)
	}
}

// TestTwoPhaseInFlight: without a Wait, a call whose key another call
// holds fails at once with an *InFlightError with a retry delay; with one,
// it gets the holder's value.
func TestTwoPhaseInFlight(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	hasty := idemcall.New(k.Store, idemcall.Options{})
	patient := idemcall.New(k.Store, idemcall.Options{Engine: engine.Options{Wait: 30 * time.Second}})
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, _, err := idemcall.Do(k.Ctx, hasty, idemcall.Call{Key: "job"}, func(ctx context.Context) (string, error) {
			close(inside)
			<-release
			return "done", nil
		})
		done <- err
	}()
	<-inside
	_, _, err := idemcall.Do(k.Ctx, hasty, idemcall.Call{Key: "job"}, func(context.Context) (string, error) { return "twice", nil })
	var inFlight *idemcall.InFlightError
	if !errors.As(err, &inFlight) || inFlight.RetryAfter <= 0 {
		t.Fatalf("duplicate without Wait: %v, want an *InFlightError with a delay", err)
	}
	got := make(chan string)
	go func() {
		v, _, err := idemcall.Do(k.Ctx, patient, idemcall.Call{Key: "job"}, func(context.Context) (string, error) { return "twice", nil })
		got <- fmt.Sprintf("%v %v", v, err)
	}()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != "done <nil>" {
		t.Errorf("duplicate with Wait got %q, want the holder's value", g)
	}
}

func TestNewPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"nil store":                 func() { idemcall.New(nil, idemcall.Options{}) },
		"InTransaction on memstore": func() { idemcall.New(memstore.New(memstore.Options{}), idemcall.Options{InTransaction: true}) },
		"negative lease": func() {
			idemcall.New(memstore.New(memstore.Options{}), idemcall.Options{Engine: engine.Options{Lease: -1}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("New did not panic")
				}
			}()
			f()
		})
	}
}

// TestInvalidKey: a key that is not a valid key fails the call, runs
// nothing, and is reported as a refusal, as the HTTP adapters report
// theirs.
func TestInvalidKey(t *testing.T) {
	var events []idem.Event
	caller := idemcall.New(memstore.New(memstore.Options{}), idemcall.Options{Observe: func(e idem.Event) { events = append(events, e) }})
	_, _, err := idemcall.Do(t.Context(), caller, idemcall.Call{Scope: "job", Key: "bad\nkey"}, func(context.Context) (int, error) { return 1, nil })
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("Do: %v, want ErrInvalidKey", err)
	}
	want := idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedInvalidKey, Scope: "job", Adapter: idemcall.AdapterName}
	if len(events) != 1 || events[0] != want {
		t.Errorf("events %+v, want one %+v", events, want)
	}
}

// TestLabelsAreStored: a call's labels are stored with its claim, for an
// operator who finds the key.
func TestLabelsAreStored(t *testing.T) {
	store := memstore.New(memstore.Options{})
	caller := idemcall.New(store, idemcall.Options{})
	labels := idem.Labels{Method: "cron", Route: "nightly-invoices", Caller: "scheduler"}
	if _, _, err := idemcall.Do(t.Context(), caller, idemcall.Call{Scope: "job", Key: "2026-12-02", Labels: labels}, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	key, _ := idem.ParseClientKey("2026-12-02")
	e, ok, err := store.Inspect(t.Context(), "job", key)
	if err != nil || !ok || e.Labels != labels {
		t.Errorf("Inspect: labels %+v (%v, %v), want %+v", e.Labels, ok, err, labels)
	}
}
