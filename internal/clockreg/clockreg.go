// Package clockreg carries memstore's test constructor to package memclock
// without a clock in memstore's public options: memstore sets NewMemstore
// when it is initialized, and memclock, which imports memstore, calls it.
// It imports nothing of idem's, so that neither import makes a cycle.
package clockreg

// NewMemstore is memstore's func(memstore.Options, func() time.Time)
// *memstore.Store: New with a clock of the caller's.
var NewMemstore any
