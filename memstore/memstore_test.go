package memstore_test

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestContract(t *testing.T) {
	idemtest.Run(t, func(t *testing.T, clock *idemtest.Clock) idem.Store {
		return memstore.New(memstore.Options{Now: clock.Now, Retention: idemtest.Retention})
	})
}

// TestBoundedModel: a store bounded to four keys behaves as a table bounded
// to four keys, ErrCapacity included, under random operations.
func TestBoundedModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(idemtest.ModelSeeds) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			clock := idemtest.NewClock()
			s := memstore.New(memstore.Options{Now: clock.Now, Retention: idemtest.Retention, Capacity: 4})
			idemtest.RunBoundedModel(t, context.Background(), s, clock, seed, idemtest.ModelSteps, 4)
		})
	}
}
