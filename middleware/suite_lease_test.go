package middleware_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/middleware"
)

// suiteLease runs the suite's tests of the lease: renewed while the handler
// runs, lost to another owner.
func suiteLease(t *testing.T, newStore newKit) {
	t.Run("RenewalKeepsClaim", func(t *testing.T) {
		t.Parallel()
		kit := newStore(t)
		counting := &renewSignal{Store: kit.store, renewed: make(chan struct{}, 100)}
		release := make(chan struct{})
		const lease = 600 * time.Millisecond
		h := middleware.New(counting, middleware.Options{Engine: engine.Options{Lease: lease}, Scope: fixedScope})(http.HandlerFunc(
			func(w http.ResponseWriter, r *http.Request) { <-release; io.WriteString(w, "slow") }))
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- serve(h, newReq("POST", "/a", `{}`, key("k"))) }()
		for range 4 { // four renewals: longer than one lease
			<-counting.renewed
		}
		k, _ := idem.ParseClientKey("k")
		c, err := kit.store.Claim(t.Context(), idem.ClaimRequest{Scope: "tenant", Key: k})
		if err != nil || c.Status != idem.InFlight {
			t.Fatalf("claim while the handler runs past its first lease = %v, %v; want in flight", c.Status, err)
		}
		close(release)
		first := <-done
		wantReplay(t, first, serve(h, newReq("POST", "/a", `{}`, key("k"))))
	})

	t.Run("LostLeaseCancelsHandler", func(t *testing.T) {
		t.Parallel()
		testLostLease(t, newStore, false)
	})

	t.Run("LostLeaseFailsCommit", func(t *testing.T) {
		t.Parallel()
		testLostLease(t, newStore, true)
	})
}

// renewSignal reports each successful renewal.
type renewSignal struct {
	idem.Store
	renewed chan struct{}
}

func (s *renewSignal) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	end, err := s.Store.Renew(ctx, tok, lease)
	if err == nil {
		s.renewed <- struct{}{}
	}
	return end, err
}

// stallRenew holds every renewal until proceed is closed, so that the lease
// runs out under a handler that is still running.
type stallRenew struct {
	idem.Store
	stalled chan struct{} // receives when a renewal starts stalling
	proceed chan struct{}
}

func (s *stallRenew) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	select {
	case s.stalled <- struct{}{}:
	default:
	}
	select {
	case <-s.proceed:
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	return s.Store.Renew(ctx, tok, lease)
}

// testLostLease makes a running handler lose its claim: its renewal stalls
// until the lease ran out and another caller took the key over. The handler
// then answers as usual, or through Commit (useCommit): its completion,
// fenced by the generation, records nothing over the new owner's claim.
func testLostLease(t *testing.T, newStore newKit, useCommit bool) {
	kit := newStore(t)
	stall := &stallRenew{Store: kit.store, stalled: make(chan struct{}, 1), proceed: make(chan struct{})}
	var events idemtest.Events
	cause := make(chan error, 1)
	takenOver := make(chan struct{})
	const lease = 300 * time.Millisecond
	h := middleware.New(stall, middleware.Options{Engine: engine.Options{Lease: lease}, Scope: fixedScope, Observer: events.ObserveHTTP})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			cause <- context.Cause(r.Context())
			<-takenOver
			if !useCommit {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "too late")
				return
			}
			err := middleware.Commit(w, r, http.StatusCreated, nil, []byte("too late"), func(context.Context, idem.Token, idem.Result) error {
				t.Error("Commit called record after the claim was lost")
				return nil
			})
			if !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("Commit after the claim was lost = %v, want ErrLeaseLost", err)
			}
		}))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve(h, newReq("POST", "/a", `{}`, key("k"))) }()
	<-stall.stalled

	// The lease runs out while the renewal stalls: the handler is
	// cancelled before it does, and another caller takes the key over
	// while the handler has not answered yet.
	k, _ := idem.ParseClientKey("k")
	ctx := t.Context()
	var taken idem.Claim
	for taken.Status != idem.Acquired {
		var err error
		taken, err = idem.ClaimWait(ctx, kit.store, idem.ClaimRequest{Scope: "tenant", Key: k, Lease: time.Minute}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
	}
	close(takenOver)
	close(stall.proceed)

	if err := <-cause; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("handler's context cause = %v, want ErrLeaseLost", err)
	}
	late := <-done
	if useCommit {
		wantProblem(t, late, http.StatusServiceUnavailable, middleware.TypeCommitFailed)
	}
	if events.Count(idem.EventLeaseLost) != 1 {
		t.Fatalf("events %v, want one lease lost", events.Kinds())
	}
	// The late answer was not recorded over the new owner's claim.
	if err := kit.store.Complete(ctx, taken.Token, idem.Result{Status: 202, Body: []byte("new owner")}); err != nil {
		t.Fatalf("the new owner could not complete: %v", err)
	}
	rec := serve(h, newReq("POST", "/a", `{}`, key("k")))
	if rec.Code != 202 || rec.Body.String() != "new owner" {
		t.Fatalf("retry got %d %q, want the new owner's result", rec.Code, rec.Body)
	}
}
