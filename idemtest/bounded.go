package idemtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// BoundedCapacity is the number of keys the stores of [RunBounded] must be
// bounded to.
const BoundedCapacity = 3

// RunBounded runs the bounded-resource contract of [idem.StateMachineConfig]
// against the stores newStore makes, which must be bounded to
// [BoundedCapacity] keys (and otherwise configured as for [Run]): a claim
// for a new key in a full store reclaims results past retention and claims
// whose lease ran out, and if that frees no room fails with
// [idem.ErrCapacity]; a retained result is never evicted. Then the
// model-based test, against a table bounded the same way.
func RunBounded(t *testing.T, newStore Factory) {
	t.Helper()
	setup := func(t *testing.T) *harness {
		t.Helper()
		t.Parallel()
		clock := NewClock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		return &harness{t: t, s: newStore(t, clock), clock: clock, ctx: ctx}
	}
	for _, tc := range boundedTests {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, setup(t)) })
	}
	for seed := range uint64(ModelSeeds) {
		t.Run(fmt.Sprintf("BoundedModel/seed=%d", seed), func(t *testing.T) {
			h := setup(t)
			RunBoundedModel(t, h.ctx, h.s, h.clock, seed, ModelSteps, BoundedCapacity)
		})
	}
}

// completed claims and completes k with a body naming it.
func (h *harness) completed(k string) {
	h.t.Helper()
	c := h.claim("s", key(k), "")
	h.wantStatus(c, idem.Acquired)
	h.complete(c.Token, idem.Result{Status: 200, Body: []byte(k)})
}

// wantReplay checks that k still replays its own result.
func (h *harness) wantReplay(k string) {
	h.t.Helper()
	c := h.claim("s", key(k), "")
	if c.Status != idem.Completed || string(c.Result.Body) != k {
		h.t.Errorf("retained result %s: status %v body %q, want its replay", k, c.Status, c.Result.Body)
	}
}

var boundedTests = []contractTest{
	{"FullNeverEvictsRetained", func(t *testing.T, h *harness) {
		h.completed("r1")
		h.completed("r2")
		h.claimWithLease("s", key("live"), "", time.Hour)
		for i := range 10 {
			_, err := h.s.Claim(h.ctx, idem.ClaimRequest{Scope: "s", Key: key(fmt.Sprint("flood-", i))})
			if !errors.Is(err, idem.ErrCapacity) {
				t.Fatalf("claim of a new key in a full store: %v, want ErrCapacity", err)
			}
		}
		h.wantReplay("r1")
		h.wantReplay("r2")
		h.wantStatus(h.claim("s", key("live"), ""), idem.InFlight)
	}},
	{"FullReclaimsExpiredResults", func(t *testing.T, h *harness) {
		h.completed("old")
		h.clock.Advance(Retention / 2)
		h.completed("young")
		h.claimWithLease("s", key("live"), "", 2*Retention)
		h.clock.Advance(Retention/2 + time.Second) // old expired, young retained
		h.wantStatus(h.claim("s", key("new"), ""), idem.Acquired)
		h.wantReplay("young")
	}},
	{"FullReclaimsAbandonedClaims", func(t *testing.T, h *harness) {
		short := h.claimWithLease("s", key("short"), "", time.Second)
		h.claimWithLease("s", key("long"), "", time.Hour)
		h.completed("done")
		h.clock.Advance(2 * time.Second)
		h.wantStatus(h.claim("s", key("new"), ""), idem.Acquired)
		h.wantReplay("done")
		h.wantStale(h.s.Complete(h.ctx, short.Token, idem.Result{Status: 200}), 0)
	}},
}
