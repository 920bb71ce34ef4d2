package middleware

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/adapter"
)

// Header names.
const (
	// KeyHeader is the IETF Idempotency-Key request header.
	KeyHeader = adapter.KeyHeader
	// KeyHeaderAlias is accepted as well: MCP servers forward
	// _meta.idempotencyKey as X-Idempotency-Key.
	KeyHeaderAlias = adapter.KeyHeaderAlias
	// ReplayedHeader marks a replayed response: "Idempotent-Replayed: true".
	ReplayedHeader = adapter.ReplayedHeader
)

// errNoKey reports a request without a key header.
var errNoKey = errors.New("no Idempotency-Key header")

// keyFromHeader returns the key of a request from Idempotency-Key or its
// alias. Both may be present only with the same key. It returns errNoKey
// when neither is present, and an error saying what is wrong otherwise.
func keyFromHeader(h http.Header) (idem.Key, error) {
	primary, hasPrimary := h[KeyHeader]
	alias, hasAlias := h[KeyHeaderAlias]
	switch {
	case !hasPrimary && !hasAlias:
		return idem.Key{}, errNoKey
	case hasPrimary && !hasAlias:
		return parseKeyLines(KeyHeader, primary)
	case !hasPrimary:
		return parseKeyLines(KeyHeaderAlias, alias)
	}
	k1, err := parseKeyLines(KeyHeader, primary)
	if err != nil {
		return idem.Key{}, err
	}
	k2, err := parseKeyLines(KeyHeaderAlias, alias)
	if err != nil {
		return idem.Key{}, err
	}
	if k1 != k2 {
		return idem.Key{}, fmt.Errorf("%s and %s differ", KeyHeader, KeyHeaderAlias)
	}
	return k1, nil
}

func parseKeyLines(name string, lines []string) (idem.Key, error) {
	if len(lines) != 1 {
		return idem.Key{}, fmt.Errorf("%s appears %d times; it takes one key, not a list", name, len(lines))
	}
	s, err := ParseKeyHeader(lines[0])
	if err != nil {
		return idem.Key{}, fmt.Errorf("%s: %w", name, err)
	}
	k, err := idem.ParseClientKey(s)
	if err != nil {
		return idem.Key{}, fmt.Errorf("%s: %w", name, adapter.KeyReason(err))
	}
	return k, nil
}

// ParseKeyHeader returns the key an Idempotency-Key header value carries.
//
// The value is a structured-field string (RFC 8941 §3.3.3), as the IETF
// draft defines it: "key", with \" and \\ the only escapes and printable
// ASCII inside. A bare value is accepted too, since many clients send one:
// visible ASCII other than DQUOTE, backslash and comma (every sf-token
// qualifies, and so do UUIDs and base64 keys that are not tokens). Spaces and
// tabs around the value are ignored. Anything else is an error: a list (a
// comma outside a string), parameters or other text after a string, control
// characters, non-ASCII bytes, an unterminated string or a bad escape.
//
// It does not check the length or emptiness of the key; [idem.ParseClientKey]
// does.
func ParseKeyHeader(v string) (string, error) { return adapter.ParseKeyHeader(v) }
