package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/pgstore"
)

// cachingStore answers claims of its cached key from memory, as
// pgstore.Store.ClaimFromCache does, and counts the claims that reach the
// store and the deadlines they came with.
type cachingStore struct {
	idem.Store
	cached      idem.Key
	result      idem.Result
	claims      int
	deadlineSet bool
}

func (s *cachingStore) ClaimFromCache(req idem.ClaimRequest) (idem.Claim, bool, error) {
	switch {
	case req.Key != s.cached:
		return idem.Claim{}, false, nil
	case req.Fingerprint != "fp":
		return idem.Claim{}, true, &idem.MismatchError{Scope: req.Scope, Key: req.Key, Completed: true}
	}
	return idem.Claim{Status: idem.Completed, Result: s.result}, true, nil
}

func (s *cachingStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	s.claims++
	_, s.deadlineSet = ctx.Deadline()
	return s.Store.Claim(ctx, req)
}

// TestClaimFromCache: a store that can answer from memory is asked first;
// what it answers is the decision (a replay, or a mismatch), and the store's
// Claim, with its timeout, is not called. A claim it cannot answer goes to
// Claim, under the store timeout.
func TestClaimFromCache(t *testing.T) {
	t.Parallel()
	cached, _ := idem.ParseClientKey("cached")
	other, _ := idem.ParseClientKey("other")
	store := &cachingStore{Store: memstore.New(memstore.Options{}), cached: cached, result: idem.Result{Status: 201}}
	eng := engine.New(store, engine.Options{})
	ctx := t.Context()

	d := eng.Claim(ctx, &engine.Request{Claim: idem.ClaimRequest{Key: cached, Fingerprint: "fp"}})
	if d.Outcome != engine.Replay || d.Claim.Result.Status != 201 {
		t.Errorf("cached key: %v %+v, want a replay of the cached result", d.Outcome, d.Claim.Result)
	}
	d = eng.Claim(ctx, &engine.Request{Claim: idem.ClaimRequest{Key: cached, Fingerprint: "another"}})
	if d.Outcome != engine.Mismatch || !errors.Is(d.Err, idem.ErrFingerprintMismatch) {
		t.Errorf("cached key, another fingerprint: %v %v, want a mismatch", d.Outcome, d.Err)
	}
	if store.claims != 0 {
		t.Fatalf("the store's Claim was called %d times for claims the cache answered", store.claims)
	}

	d = eng.Claim(ctx, &engine.Request{Claim: idem.ClaimRequest{Key: other, Fingerprint: "fp"}})
	if d.Outcome != engine.Run || store.claims != 1 || !store.deadlineSet {
		t.Errorf("uncached key: %v after %d claims (deadline set: %v), want run after one claim under the store timeout",
			d.Outcome, store.claims, store.deadlineSet)
	}
	if d.Outcome == engine.Run {
		if err := store.Release(ctx, d.Claim.Token); err != nil {
			t.Fatal(err)
		}
	}
}

// pgstore's replay cache is what the engine asks first.
var _ interface {
	ClaimFromCache(idem.ClaimRequest) (idem.Claim, bool, error)
} = (*pgstore.Store)(nil)
