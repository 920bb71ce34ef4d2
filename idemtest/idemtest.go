// Package idemtest is the contract suite every [idem.Store] must pass: each
// row of the transition table, the six invariants of [idem.Store], and a
// model-based randomized test that applies random operations and clock steps
// to a store and to the pure [idem.StateMachine] and compares every outcome.
//
// A store's tests call [Run] with a factory:
//
//	func TestContract(t *testing.T) {
//		idemtest.Run(t, func(t *testing.T, clock *idemtest.Clock) idem.Store {
//			return newStore(clock.Now) // a store that reads time from clock.Now
//		})
//	}
//
// Every subtest gets its own store and clock.
package idemtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Retention is the retention the factory's store must be configured with.
const Retention = time.Hour

// Factory returns a new, empty store reading time from clock.Now, with
// retention [Retention] and the default lease [idem.DefaultLease], and no
// capacity bound the suite could reach (it uses at most a few hundred keys).
// It registers its own cleanup with t.
type Factory func(t *testing.T, clock *Clock) idem.Store

// Run runs the contract suite against the stores newStore makes. Subtests run
// in parallel.
func Run(t *testing.T, newStore Factory) {
	t.Helper()
	setup := func(t *testing.T) (idem.Store, *Clock, context.Context) {
		t.Helper()
		t.Parallel()
		clock := NewClock()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		t.Cleanup(cancel)
		return newStore(t, clock), clock, ctx
	}
	for _, tc := range contractTests {
		t.Run(tc.name, func(t *testing.T) {
			s, clock, ctx := setup(t)
			tc.test(t, &harness{t: t, s: s, clock: clock, ctx: ctx})
		})
	}
	for seed := range uint64(ModelSeeds) {
		t.Run(fmt.Sprintf("Model/seed=%d", seed), func(t *testing.T) {
			s, clock, ctx := setup(t)
			RunModel(t, ctx, s, clock, seed, ModelSteps)
		})
	}
}

// ModelSeeds and ModelSteps size the model-based test in [Run]: that many
// random sequences of that many steps each.
const (
	ModelSeeds = 8
	ModelSteps = 200
)
