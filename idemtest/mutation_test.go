package idemtest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/memclock"
	"github.com/idemkit/idem/memstore"
)

// The suite is only worth its green if it turns red on a broken store. Each
// mutant below breaks one promise of idem.Store; TestSuiteCatchesMutants runs
// the suite against each in a subprocess and requires it to fail.

const mutantEnv = "IDEMTEST_MUTANT"

var mutants = map[string]func(*memstore.Store) idem.Store{
	// Invariant 3: stale tokens act as if they were current.
	"ignore-generation": func(s *memstore.Store) idem.Store { return ignoreGeneration{s} },
	// Invariant 5: every scope is the same scope.
	"ignore-scope": func(s *memstore.Store) idem.Store { return ignoreScope{s} },
	// Invariant 4: a replay is not the recorded result.
	"corrupt-result": func(s *memstore.Store) idem.Store { return corruptResult{s} },
	// Mismatch: a reused key with another request replays.
	"ignore-fingerprint": func(s *memstore.Store) idem.Store { return ignoreFingerprint{s} },
	// Invariant 6: check, then claim, with a window between.
	"check-then-claim": func(s *memstore.Store) idem.Store { return checkThenClaim{s} },
	// Renewal that does not extend the lease.
	"renew-noop": func(s *memstore.Store) idem.Store { return renewNoop{s} },
	// Leases that never run out: abandoned claims stick forever.
	"no-takeover": func(s *memstore.Store) idem.Store { return noTakeover{s} },
	// Invariant 4 under a bound: a full store evicts the oldest result.
	"evict-retained": func(s *memstore.Store) idem.Store { return &evictRetained{Store: s} },
}

func TestSuiteCatchesMutants(t *testing.T) {
	if os.Getenv(mutantEnv) != "" {
		return // we are the subprocess
	}
	for name := range mutants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteUnderMutant$", "-test.count=1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the contract suite passed against mutant %q; it must fail:\n%s", name, out)
			}
			if !strings.Contains(string(out), "--- FAIL") {
				t.Fatalf("mutant %q: the subprocess failed without a test failure:\n%s", name, out)
			}
		})
	}
}

// TestSuiteUnderMutant runs the contract suite against the mutant named by
// IDEMTEST_MUTANT, or against the unmodified memstore when it is unset.
func TestSuiteUnderMutant(t *testing.T) {
	name := os.Getenv(mutantEnv)
	factory := func(capacity int) idemtest.Factory {
		return func(t *testing.T, clock *idemtest.Clock) idem.Store {
			s := memclock.New(memstore.Options{Retention: idemtest.Retention, Capacity: capacity}, clock.Now)
			if name == "" {
				return s
			}
			return mutants[name](s)
		}
	}
	t.Run("Run", func(t *testing.T) { idemtest.Run(t, factory(0)) })
	t.Run("RunBounded", func(t *testing.T) { idemtest.RunBounded(t, factory(idemtest.BoundedCapacity)) })
}

type ignoreGeneration struct{ *memstore.Store }

func (m ignoreGeneration) current(tok idem.Token) idem.Token {
	if e, ok := m.Lookup(tok.Scope, tok.Key); ok && e.State == idem.StateClaimed {
		tok.Generation = e.Generation
	}
	return tok
}
func (m ignoreGeneration) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	return m.Store.Complete(ctx, m.current(tok), res)
}
func (m ignoreGeneration) Release(ctx context.Context, tok idem.Token) error {
	return m.Store.Release(ctx, m.current(tok))
}
func (m ignoreGeneration) Renew(ctx context.Context, tok idem.Token, d time.Duration) (time.Time, error) {
	return m.Store.Renew(ctx, m.current(tok), d)
}

type ignoreScope struct{ *memstore.Store }

func (m ignoreScope) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	scope := req.Scope
	req.Scope = ""
	c, err := m.Store.Claim(ctx, req)
	c.Token.Scope = scope
	return c, err
}
func (m ignoreScope) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	tok.Scope = ""
	return m.Store.Complete(ctx, tok, res)
}
func (m ignoreScope) Release(ctx context.Context, tok idem.Token) error {
	tok.Scope = ""
	return m.Store.Release(ctx, tok)
}
func (m ignoreScope) Renew(ctx context.Context, tok idem.Token, d time.Duration) (time.Time, error) {
	tok.Scope = ""
	return m.Store.Renew(ctx, tok, d)
}

type corruptResult struct{ *memstore.Store }

func (m corruptResult) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	c, err := m.Store.Claim(ctx, req)
	if n := len(c.Result.Body); n > 0 {
		c.Result.Body = c.Result.Body[:n-1]
	}
	return c, err
}

type ignoreFingerprint struct{ *memstore.Store }

func (m ignoreFingerprint) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	req.Fingerprint = ""
	return m.Store.Claim(ctx, req)
}

type checkThenClaim struct{ *memstore.Store }

func (m checkThenClaim) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if _, ok := m.Lookup(req.Scope, req.Key); !ok {
		time.Sleep(time.Millisecond) // the round trip between a separate check and the claim
		_, _ = m.Forget(ctx, req.Scope, req.Key, true)
	}
	return m.Store.Claim(ctx, req)
}

type renewNoop struct{ *memstore.Store }

func (m renewNoop) Renew(ctx context.Context, tok idem.Token, d time.Duration) (time.Time, error) {
	e, ok := m.Lookup(tok.Scope, tok.Key)
	if !ok || e.Generation != tok.Generation {
		return m.Store.Renew(ctx, tok, d)
	}
	return e.LeaseEnd, nil
}

type noTakeover struct{ *memstore.Store }

func (m noTakeover) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if e, ok := m.Lookup(req.Scope, req.Key); ok && e.State == idem.StateClaimed {
		return idem.Claim{Status: idem.InFlight, LeaseEnd: e.LeaseEnd}, nil
	}
	return m.Store.Claim(ctx, req)
}

// evictRetained is the bounded-resource rule before it kept retained
// results: when the store is full, the oldest completed key is forgotten
// to make room.
type evictRetained struct {
	*memstore.Store
	mu        sync.Mutex
	completed []idem.Token
}

func (m *evictRetained) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	err := m.Store.Complete(ctx, tok, res)
	if err == nil {
		m.mu.Lock()
		m.completed = append(m.completed, tok)
		m.mu.Unlock()
	}
	return err
}

func (m *evictRetained) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	c, err := m.Store.Claim(ctx, req)
	for errors.Is(err, idem.ErrCapacity) {
		m.mu.Lock()
		if len(m.completed) == 0 {
			m.mu.Unlock()
			break
		}
		oldest := m.completed[0]
		m.completed = m.completed[1:]
		m.mu.Unlock()
		_, _ = m.Forget(ctx, oldest.Scope, oldest.Key, true)
		c, err = m.Store.Claim(ctx, req)
	}
	return c, err
}
