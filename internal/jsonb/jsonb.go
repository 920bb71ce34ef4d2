// Package jsonb holds the rule the root's Result encoding and pgstore's
// large-body completion must agree on: which bytes PostgreSQL's jsonb keeps
// as a JSON string, byte for byte. Result.MarshalJSON writes a body as a
// string or as base64 by it, and pgstore, which builds a large body's JSON
// in SQL, chooses the same way; one function keeps the two from drifting.
package jsonb

import (
	"bytes"
	"unicode/utf8"
)

// IsText reports whether b can be stored as a JSON string in PostgreSQL's
// jsonb and read back byte for byte: valid UTF-8 without NUL (jsonb refuses
// \u0000, and encoding/json would replace invalid UTF-8).
func IsText[T string | []byte](b T) bool {
	return utf8.Valid([]byte(b)) && bytes.IndexByte([]byte(b), 0) < 0
}
