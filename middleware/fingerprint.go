package middleware

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
)

// DefaultFingerprint is the fingerprint used when Options.Fingerprint is nil:
// SHA-256 (hex) over the method, the URL path as sent (escaped: /a%2Fb and
// /a/b are two resources), the raw query, the Content-Type and the SHA-256
// of the body, each length-prefixed. Headers other than Content-Type do
// not count, so a retry with a new Date or tracing header is still the
// same request.
func DefaultFingerprint(r *http.Request, body []byte) string {
	bodySum := sha256.Sum256(body)
	var arr [512]byte
	b := arr[:0]
	b = appendField(b, r.Method)
	b = appendField(b, r.URL.EscapedPath())
	b = appendField(b, r.URL.RawQuery)
	b = appendField(b, r.Header.Get("Content-Type"))
	b = append(b, bodySum[:]...)
	return hexSum(b)
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// hexSum returns SHA-256 of b in hex, with one allocation (the string).
func hexSum(b []byte) string {
	sum := sha256.Sum256(b)
	var dst [2 * sha256.Size]byte
	hex.Encode(dst[:], sum[:])
	return string(dst[:])
}
