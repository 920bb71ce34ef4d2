package idem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

// TestClaimRequestMismatches is the fingerprint rule every store applies:
// a stored fingerprint refuses a request only when both are set and they
// differ.
func TestClaimRequestMismatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stored, asked string
		want          bool
	}{
		{"a", "a", false},
		{"a", "b", true},
		{"", "b", false},
		{"a", "", false},
		{"", "", false},
	} {
		if got := (idem.ClaimRequest{Fingerprint: tc.asked}).Mismatches(tc.stored); got != tc.want {
			t.Errorf("stored %q, asked %q: Mismatches = %v, want %v", tc.stored, tc.asked, got, tc.want)
		}
	}
}

// TestClaimRequestValidate: a scope over MaxScopeLen bytes and an invalid
// key are refused, with an *InvalidKeyError.
func TestClaimRequestValidate(t *testing.T) {
	t.Parallel()
	ok := idem.KeyFromRequestID(idem.StringRequestID("a"))
	for _, tc := range []struct {
		name  string
		req   idem.ClaimRequest
		valid bool
	}{
		{"longest scope", idem.ClaimRequest{Scope: strings.Repeat("s", idem.MaxScopeLen), Key: ok}, true},
		{"empty scope", idem.ClaimRequest{Key: ok}, true},
		{"scope too long", idem.ClaimRequest{Scope: strings.Repeat("s", idem.MaxScopeLen+1), Key: ok}, false},
		{"zero key", idem.ClaimRequest{Scope: "s"}, false},
	} {
		err := tc.req.Validate()
		var ik *idem.InvalidKeyError
		switch {
		case tc.valid && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.valid && !errors.As(err, &ik):
			t.Errorf("%s: %v, want an *idem.InvalidKeyError", tc.name, err)
		}
	}
}
