package pgschema

import (
	"errors"
	"fmt"
)

// ErrEncoding is matched by an [*EncodingError]: the database's encoding is
// not UTF8.
var ErrEncoding = errors.New("idem: the database's encoding is not UTF8")

// EncodingError reports a database whose server encoding is not UTF8.
// idem stores what clients send (keys, recorded headers and bodies) as
// UTF-8 text and jsonb, which PostgreSQL can hold and check only in a UTF8
// database: in LATIN1 (or any other single-byte encoding) a character the
// encoding lacks makes a completion fail (SQLSTATE 22P05), so the key would
// be left to its lease and a retry run again; SQL_ASCII checks nothing and
// refuses jsonb's \u escapes of non-ASCII characters. It matches
// [ErrEncoding].
type EncodingError struct {
	// Encoding is the database's server_encoding, as PostgreSQL names it.
	Encoding string
}

func (e *EncodingError) Error() string {
	return fmt.Sprintf("idem: the database's encoding is %s; idem needs a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')", e.Encoding)
}

// Is reports whether target is [ErrEncoding].
func (e *EncodingError) Is(target error) bool { return target == ErrEncoding }

// EncodingQuery asks for the database's server encoding.
const EncodingQuery = `SELECT current_setting('server_encoding')`

// CheckEncoding returns an [*EncodingError] unless encoding, the
// database's server_encoding, is UTF8.
func CheckEncoding(encoding string) error {
	if encoding == "UTF8" {
		return nil
	}
	return &EncodingError{Encoding: encoding}
}
