package middleware

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
)

// DefaultScope is the scope used when Options.Scope is nil: SHA-256 (hex) over
// the credentials (the Authorization and X-Api-Key headers), the session
// (X-Session-Id), the method and the route, each length-prefixed so that
// distinct inputs never collide. The route is r.Pattern when the middleware
// runs inside a route registered on an [http.ServeMux], the URL path
// otherwise.
//
// So one key sent by two principals, two sessions, or to two routes is two
// keys. Credentials are hashed, never stored in clear. Requests with neither
// credentials nor a session share one scope per route, so anonymous clients
// must choose unguessable keys (UUIDs). A service whose
// credentials rotate during a client's retries (short-lived tokens) should
// scope by the authenticated principal instead, with its own [ScopeFunc].
func DefaultScope(r *http.Request) string {
	route := r.Pattern
	if route == "" {
		route = r.URL.Path
	}
	var arr [512]byte
	b := arr[:0]
	b = appendField(b, r.Header.Get("Authorization"))
	b = appendField(b, r.Header.Get("X-Api-Key"))
	b = appendField(b, r.Header.Get("X-Session-Id"))
	b = appendField(b, r.Method)
	b = appendField(b, route)
	return hexSum(b)
}

// DefaultFingerprint is the fingerprint used when Options.Fingerprint is nil:
// SHA-256 (hex) over the method, the URL path, the raw query, the
// Content-Type and the SHA-256 of the body, each length-prefixed. Headers
// other than Content-Type do not count, so a retry with a new Date or
// tracing header is still the same request.
func DefaultFingerprint(r *http.Request, body []byte) string {
	bodySum := sha256.Sum256(body)
	var arr [512]byte
	b := arr[:0]
	b = appendField(b, r.Method)
	b = appendField(b, r.URL.Path)
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
