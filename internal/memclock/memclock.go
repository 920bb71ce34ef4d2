// Package memclock makes memstores that read a test's clock instead of
// time.Now: for the tests of other packages (idemtest's contract, the
// sweeper's, idemotel's), since memstore's options have no clock.
package memclock

import (
	"time"

	"github.com/idemkit/idem/internal/clockreg"
	"github.com/idemkit/idem/memstore"
)

// New is memstore.New with now as the store's clock.
func New(opts memstore.Options, now func() time.Time) *memstore.Store {
	return clockreg.NewMemstore.(func(memstore.Options, func() time.Time) *memstore.Store)(opts, now)
}
