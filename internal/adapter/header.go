package adapter

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
)

// Header names both adapters read or write.
const (
	// KeyHeader is the IETF Idempotency-Key request header.
	KeyHeader = "Idempotency-Key"
	// KeyHeaderAlias is accepted as well: MCP servers forward
	// _meta.idempotencyKey upstream as X-Idempotency-Key.
	KeyHeaderAlias = "X-Idempotency-Key"
	// ReplayedHeader marks a replayed response: "Idempotent-Replayed: true".
	ReplayedHeader = "Idempotent-Replayed"
)

// ParseKeyHeader returns the key an Idempotency-Key header value carries: a
// structured-field string (RFC 8941 §3.3.3) or a bare value of visible ASCII
// other than DQUOTE, backslash and comma, with spaces and tabs around it
// ignored. middleware.ParseKeyHeader documents it for users.
func ParseKeyHeader(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" || v[0] != '"' {
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case c == ',':
				return "", errors.New("a list of keys (comma); send exactly one key")
			case c == '"' || c == '\\':
				return "", fmt.Errorf("%q at offset %d of an unquoted key", c, i)
			case c <= 0x20 || c >= 0x7f:
				return "", fmt.Errorf("byte 0x%02x at offset %d is not visible ASCII", c, i)
			}
		}
		return v, nil
	}
	// A quoted string. Unescaping needs a copy only when there are escapes.
	var b []byte
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			if i+1 >= len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", fmt.Errorf("bad escape at offset %d: only \\\" and \\\\ are allowed", i)
			}
			if b == nil {
				b = append(make([]byte, 0, len(v)), v[1:i]...)
			}
			b = append(b, v[i+1])
			i++
		case c == '"':
			if rest := v[i+1:]; rest != "" {
				if strings.TrimLeft(rest, " \t")[0] == ',' {
					return "", errors.New("a list of keys (comma); send exactly one key")
				}
				return "", fmt.Errorf("unexpected %q after the key string", rest)
			}
			if b == nil {
				return v[1:i], nil
			}
			return string(b), nil
		case c < 0x20 || c >= 0x7f:
			return "", fmt.Errorf("byte 0x%02x at offset %d is not printable ASCII", c, i)
		default:
			if b != nil {
				b = append(b, c)
			}
		}
	}
	return "", errors.New("unterminated string: missing closing quote")
}

// KeyReason returns err with the message a client reads: an invalid key's
// reason alone ("empty"), without the "idem: invalid key:" that names the
// Go package. It still matches idem.ErrInvalidKey. Any other error is
// returned as it is.
func KeyReason(err error) error {
	if ik, ok := err.(*idem.InvalidKeyError); ok {
		return reasonError{ik}
	}
	return err
}

// reasonError is an *idem.InvalidKeyError that reads as its reason.
type reasonError struct{ err *idem.InvalidKeyError }

func (e reasonError) Error() string { return e.err.Reason }
func (e reasonError) Unwrap() error { return e.err }
