package engine_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/memstore"
)

// limitsStore is an idem.TxStore that records the bounds of each
// BeginClaim and answers it in flight.
type limitsStore struct {
	idem.Store
	mu     sync.Mutex
	limits []idem.TxLimits
}

func (s *limitsStore) BeginClaim(_ context.Context, _ idem.ClaimRequest, limits idem.TxLimits) (idem.Claim, idem.TxClaim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = append(s.limits, limits)
	return idem.Claim{Status: idem.InFlight}, nil, nil
}

// TestIdleInTransaction: the bound on how long a claim's transaction may
// stay idle is Options.IdleInTransaction, MaxExecution by default, never
// the lease (which nothing renews on the one-commit path, and which can
// be much shorter than healthy work pauses); negative panics.
func TestIdleInTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts engine.Options
		want time.Duration
	}{
		{"default", engine.Options{}, engine.DefaultMaxExecution},
		{"a short lease", engine.Options{Lease: 2 * time.Second}, engine.DefaultMaxExecution},
		{"MaxExecution", engine.Options{MaxExecution: 2 * time.Minute}, 2 * time.Minute},
		{"no MaxExecution", engine.Options{MaxExecution: -1}, engine.DefaultMaxExecution},
		{"set", engine.Options{IdleInTransaction: 30 * time.Second, Lease: 2 * time.Second}, 30 * time.Second},
	} {
		s := &limitsStore{Store: memstore.New(memstore.Options{})}
		e := engine.New(s, tc.opts)
		e.Claim(t.Context(), &engine.Request{Claim: idem.ClaimRequest{Scope: "s", Key: idem.KeyFromRequestID(idem.StringRequestID("k"))}, InTransaction: true})
		if len(s.limits) != 1 || s.limits[0].Idle != tc.want {
			t.Errorf("%s: BeginClaim's limits %+v, want Idle %v", tc.name, s.limits, tc.want)
		}
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "IdleInTransaction") {
			t.Errorf("a negative IdleInTransaction: panic %v, want one naming it", p)
		}
	}()
	engine.New(&limitsStore{Store: memstore.New(memstore.Options{})}, engine.Options{IdleInTransaction: -time.Second})
}

// TestIdleInTransactionWarning: New warns, once, of an IdleInTransaction
// shorter than healthy work may pause between two statements
// (MinIdleInTransaction) and than the work may run, for a store that can
// claim in a transaction; not of the default, nor of a bound the work's
// deadline comes before.
func TestIdleInTransactionWarning(t *testing.T) {
	t.Parallel()
	tx := func() idem.Store { return &limitsStore{Store: memstore.New(memstore.Options{})} }
	for _, tc := range []struct {
		name  string
		store idem.Store
		opts  engine.Options
		warn  bool
	}{
		{"short", tx(), engine.Options{IdleInTransaction: 2 * time.Second}, true},
		{"short, no MaxExecution", tx(), engine.Options{IdleInTransaction: 2 * time.Second, MaxExecution: -1}, true},
		{"long enough", tx(), engine.Options{IdleInTransaction: engine.MinIdleInTransaction}, false},
		{"the default, with a short MaxExecution", tx(), engine.Options{MaxExecution: time.Second}, false},
		{"longer than MaxExecution", tx(), engine.Options{IdleInTransaction: 2 * time.Second, MaxExecution: time.Second}, false},
		{"a store without transactions", memstore.New(memstore.Options{}), engine.Options{IdleInTransaction: 2 * time.Second}, false},
	} {
		var log bytes.Buffer
		tc.opts.Logger = slog.New(slog.NewTextHandler(&log, nil))
		engine.New(tc.store, tc.opts)
		warned := strings.Contains(log.String(), "level=WARN") && strings.Contains(log.String(), "IdleInTransaction")
		if warned != tc.warn {
			t.Errorf("%s: warned %v, want %v; log:\n%s", tc.name, warned, tc.warn, log.String())
		}
	}
}
