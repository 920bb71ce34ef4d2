package idem

import (
	"strings"
	"testing"
)

// Errors end up in logs: they must not carry a client's key in clear.
func TestErrorsDoNotDiscloseKeys(t *testing.T) {
	t.Parallel()
	k, _ := ParseClientKey("SECRET-KEY")
	for _, err := range []error{
		&StaleClaimError{Token: Token{Scope: "s", Key: k, Generation: 1}},
		&StaleClaimError{Token: Token{Scope: "s", Key: k, Generation: 1}, Current: 2},
		&MismatchError{Scope: "s", Key: k},
	} {
		msg := err.Error()
		if strings.Contains(msg, "SECRET") {
			t.Errorf("%T: %q discloses the key", err, msg)
		}
		if !strings.Contains(msg, KeyDigest("s", k)) {
			t.Errorf("%T: %q does not name the key's digest", err, msg)
		}
	}
}
