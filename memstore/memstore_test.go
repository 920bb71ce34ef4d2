package memstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/memclock"
	"github.com/idemkit/idem/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestContract(t *testing.T) {
	idemtest.Run(t, func(t *testing.T, clock *idemtest.Clock) idem.Store {
		return memclock.New(memstore.Options{Retention: idemtest.Retention}, clock.Now)
	})
}

// TestBoundedContract: the bounded-resource rule, and the model test
// against a bounded table.
func TestBoundedContract(t *testing.T) {
	idemtest.RunBounded(t, func(t *testing.T, clock *idemtest.Clock) idem.Store {
		return memclock.New(memstore.Options{Retention: idemtest.Retention, Capacity: idemtest.BoundedCapacity}, clock.Now)
	})
}
