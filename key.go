package idem

import (
	"errors"
	"fmt"
	"strings"
)

// MaxKeyLen is the longest encoded [Key], in bytes, a [Store] accepts. A
// longer key is rejected with an [*InvalidKeyError]. It bounds what one
// client-chosen id can make a store index.
const MaxKeyLen = 1024

// MaxScopeLen is the longest scope, in bytes, a [Store] accepts. A longer
// scope is rejected with an [*InvalidKeyError]. Together with [MaxKeyLen] it
// keeps a (scope, key) within what a database index can hold.
const MaxScopeLen = 1024

// MaxHeaderKeyLen is the longest key [ParseClientKey] accepts, in characters.
const MaxHeaderKeyLen = 255

// Key is what is being asked, within a scope: the thing a side effect is
// deduplicated by. The zero Key is invalid.
//
// Keys are built only by the constructors below, and their encoding is
// injective: two constructor calls return equal keys exactly when they are
// the same constructor with equal arguments. The encoding is a form tag
// followed by each field, every field escaped and separated by '/':
//
//	KeyFromRequestID(id)                     id/<id>
//	KeyForRequest(session, id)               req/<session>/<id>
//	KeyForMethodCall(session, id, m, target) call/<session>/<id>/<m>/<target>
//	ParseClientKey(k)                        key/<k>
//
// Escaping replaces '%', '/', and every byte outside the printable ASCII
// range 0x21–0x7E with %XX (upper-case hex). Because '%' itself is escaped,
// escaping is injective; because '/' is escaped, the separators are exactly
// the unescaped slashes, so the fields are recovered unambiguously; because
// the tags differ, the forms never meet. FuzzKeyInjective checks this.
//
// A Key is comparable and may be used as a map key.
type Key struct {
	s string
}

// KeyFromRequestID returns the key for the request id a retrying client
// repeats. The id renders through [RequestID.String], so a numeric id and a
// string id that print the same are the same key.
func KeyFromRequestID(id RequestID) Key {
	return buildKey("id", id.String())
}

// KeyForRequest returns the key for one request within one session.
//
// A request id alone is not a key across sessions: ids are unique only per
// connection, and every MCP client numbers its first request 1. Keyed on the
// bare id, session B's request 7 would be answered with session A's result.
func KeyForRequest(session SessionID, id RequestID) Key {
	return buildKey("req", string(session), id.String())
}

// KeyForMethodCall returns the key for a method invocation: who asked
// (session), when (the request id), and what (the method and its target, for
// tools/call the tool name).
//
// JSON-RPC lets a peer reuse an id once its earlier request was answered, and
// real clients do. Keyed on session and id alone, the second tools/call of a
// session under a reused id would be answered with the first one's result: a
// valid result for the wrong tool, which the caller cannot tell from a
// correct one. Adding the method and target makes a different call under a
// reused id a different key, while a genuine retry still replays.
func KeyForMethodCall(session SessionID, id RequestID, method, target string) Key {
	return buildKey("call", string(session), id.String(), method, target)
}

// ParseClientKey validates a client-supplied idempotency key, such as the value of
// an Idempotency-Key header or an MCP _meta.idempotencyKey, and returns it as
// a Key. It must be 1 to [MaxHeaderKeyLen] characters of printable ASCII
// (0x20–0x7E); anything else is an [*InvalidKeyError]. It is for keys a
// client chose; to read back a key already encoded (from a log, the
// database or [Key.String]) use [ParseStoredKey].
func ParseClientKey(s string) (Key, error) {
	switch {
	case s == "":
		return Key{}, &InvalidKeyError{Reason: "empty"}
	case len(s) > MaxHeaderKeyLen:
		return Key{}, &InvalidKeyError{Reason: fmt.Sprintf("longer than %d characters", MaxHeaderKeyLen)}
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return Key{}, &InvalidKeyError{Reason: fmt.Sprintf("byte 0x%02x at offset %d is not printable ASCII", c, i)}
		}
	}
	return buildKey("key", s), nil
}

// ParseClientRoundKey is [ParseClientKey] for one round of a multi round-trip call
// (MCP 2026-07-28, [SEP-2322]): a client sends the same key s on every round,
// and round (a digest of what it sent back, the round's requestState and
// inputResponses) tells the rounds apart, so each is its own claim. Keys of
// rounds never equal keys from ParseClientKey or from each other's rounds.
//
// [SEP-2322]: https://github.com/modelcontextprotocol/modelcontextprotocol/issues/2322
func ParseClientRoundKey(s, round string) (Key, error) {
	if _, err := ParseClientKey(s); err != nil {
		return Key{}, err
	}
	return buildKey("round", s, round), nil
}

// ParseStoredKey returns the key whose encoding is s, as [Key.String]
// rendered it: for tools that read keys back, such as an operator's CLI.
// It checks only that s has a known form tag and is not longer than
// [MaxKeyLen]. A key a client sent is [ParseClientKey]'s, never this one's: "id/x"
// from a client is a key of its own, not the request-id key it spells.
func ParseStoredKey(s string) (Key, error) {
	if len(s) > MaxKeyLen {
		return Key{}, &InvalidKeyError{Reason: fmt.Sprintf("longer than %d bytes", MaxKeyLen)}
	}
	tag, _, ok := strings.Cut(s, "/")
	switch {
	case !ok:
		return Key{}, &InvalidKeyError{Reason: "no form tag"}
	case tag != "id" && tag != "req" && tag != "call" && tag != "key" && tag != "round":
		return Key{}, &InvalidKeyError{Reason: fmt.Sprintf("unknown form tag %q", tag)}
	}
	return Key{s: s}, nil
}

// String returns the key's encoding. It is what stores persist.
func (k Key) String() string { return k.s }

// IsZero reports whether k is the zero Key.
func (k Key) IsZero() bool { return k.s == "" }

// Validate reports whether a store may accept k: it is not zero and not
// longer than [MaxKeyLen]. Stores call it before touching their state.
func (k Key) Validate() error {
	switch {
	case k.s == "":
		return &InvalidKeyError{Reason: "zero key"}
	case len(k.s) > MaxKeyLen:
		return &InvalidKeyError{Reason: fmt.Sprintf("encoded key is %d bytes, longer than %d", len(k.s), MaxKeyLen)}
	}
	return nil
}

func buildKey(tag string, fields ...string) Key {
	var b strings.Builder
	n := len(tag)
	for _, f := range fields {
		n += 1 + len(f)
	}
	b.Grow(n)
	b.WriteString(tag)
	for _, f := range fields {
		b.WriteByte('/')
		escapeTo(&b, f)
	}
	return Key{s: b.String()}
}

const hexDigits = "0123456789ABCDEF"

func escapeTo(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c > 0x20 && c < 0x7f && c != '%' && c != '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
}

// errKeyForm is returned by splitKey for encodings no constructor makes.
var errKeyForm = errors.New("idem: not a key encoding")

// splitKey inverts the encoding: the tag and the unescaped fields. It exists
// to prove injectivity (a function with a left inverse is injective) and is
// exercised by the fuzz test.
func splitKey(s string) (tag string, fields []string, err error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 {
		return "", nil, errKeyForm
	}
	for _, p := range parts[1:] {
		f, err := unescape(p)
		if err != nil {
			return "", nil, err
		}
		fields = append(fields, f)
	}
	return parts[0], fields, nil
}

func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", errKeyForm
		}
		hi, lo := strings.IndexByte(hexDigits, s[i+1]), strings.IndexByte(hexDigits, s[i+2])
		if hi < 0 || lo < 0 {
			return "", errKeyForm
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), nil
}
