package idemtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func key(s string) idem.Key { return idem.KeyFromRequestID(idem.StringRequestID(s)) }

// harness wraps a store with assertions that fail the test on error.
type harness struct {
	t     *testing.T
	s     idem.Store
	clock *Clock
	ctx   context.Context
}

func (h *harness) claim(scope string, k idem.Key, fp string) idem.Claim {
	h.t.Helper()
	return h.claimWithLease(scope, k, fp, 0)
}

func (h *harness) claimWithLease(scope string, k idem.Key, fp string, lease time.Duration) idem.Claim {
	h.t.Helper()
	c, err := h.s.Claim(h.ctx, idem.ClaimRequest{Scope: scope, Key: k, Fingerprint: fp, Lease: lease, Owner: "idemtest"})
	if err != nil {
		h.t.Fatalf("claim %q %q: %v", scope, k, err)
	}
	return c
}

func (h *harness) complete(tok idem.Token, res idem.Result) {
	h.t.Helper()
	if err := h.s.Complete(h.ctx, tok, res); err != nil {
		h.t.Fatalf("complete %v: %v", tok, err)
	}
}

func (h *harness) release(tok idem.Token) {
	h.t.Helper()
	if err := h.s.Release(h.ctx, tok); err != nil {
		h.t.Fatalf("release %v: %v", tok, err)
	}
}

func (h *harness) wantStatus(c idem.Claim, want idem.ClaimStatus) {
	h.t.Helper()
	if c.Status != want {
		h.t.Fatalf("claim status = %v, want %v", c.Status, want)
	}
}

// wantStale checks err is a stale-claim error reporting current (zero: the
// key is absent).
func (h *harness) wantStale(err error, current int64) {
	h.t.Helper()
	var se *idem.StaleClaimError
	if !errors.As(err, &se) || !errors.Is(err, idem.ErrStaleClaim) {
		h.t.Fatalf("err = %v, want *StaleClaimError", err)
	}
	if se.Current != current {
		h.t.Errorf("stale claim reports current generation %d, want %d", se.Current, current)
	}
}
