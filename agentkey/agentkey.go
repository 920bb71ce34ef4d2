// Package agentkey derives the idempotency key an agent puts in an MCP
// tools/call's _meta.idempotencyKey, and holds the canonical JSON form that
// key is computed over.
//
// It is the client's half: an agent (or a gateway in front of tools) calls
// [Derive] before sending a call, with no server, store or SDK involved, so
// the package imports only the standard library and nothing of idem's. It
// is not in the root package, which is the server-side domain (keys,
// claims, results, the store port): the derivation is a protocol between an
// agent and the tools it calls, published with test vectors
// (testdata/vectors.json) that another implementation can check itself
// against.
//
// mcphttp uses [CanonicalJSON] too, for the fingerprint of a call's
// arguments and the digest of a multi round-trip call's round: the same
// canonical form, so that the agent key and the server agree on which
// arguments are the same.
package agentkey

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrInvalidJSON is returned by [CanonicalJSON] and [Derive] for input that
// is not one JSON value, holds an object with a repeated member name, or (for
// Derive) arguments that are not an object.
var ErrInvalidJSON = errors.New("agentkey: invalid JSON")

// maxJSONDepth bounds the nesting CanonicalJSON follows, so a hostile input
// cannot exhaust the stack.
const maxJSONDepth = 512

// Derive derives the idempotency key an agent puts in an MCP tools/call's
// _meta.idempotencyKey (which mcphttp reads, and which a tool that calls a
// REST API forwards as X-Idempotency-Key): the lower-case hex SHA-256 of the
// conversation's session id, the current turn (the user message the agent is
// answering), the tool name and the tool's arguments.
//
// The same tool with the same arguments, answering the same message, always
// gives the same key; a different tool, different arguments, a new message
// or a new conversation give a different one. So a model that repeats itself
// within one turn is recognised, and a user who explicitly asks again in a
// new message is not blocked.
//
// # Canonical form
//
// The hash is taken over the bytes of the JSON array
//
//	[session, turn, tool, arguments]
//
// written in the canonical form of [CanonicalJSON], where arguments is args
// with every top-level member whose value is null or the empty string
// removed. Nil, empty or null args mean no arguments ({}). Arguments that are
// not a JSON object are an error wrapping [ErrInvalidJSON]. Nested values
// are kept as they are (a null inside an array or a nested object is data),
// only written canonically. For example session "s", turn "1", tool
// "create_invoice" and args {"b": 2, "a": "x", "c": null, "d": ""} hash
//
//	["s","1","create_invoice",{"a":"x","b":2}]
//
// The published test vectors are in testdata/vectors.json.
func Derive(session, turn, tool string, args json.RawMessage) (string, error) {
	pre, err := agentKeyPreimage(session, turn, tool, args)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(pre)
	return hex.EncodeToString(sum[:]), nil
}

func agentKeyPreimage(session, turn, tool string, args json.RawMessage) ([]byte, error) {
	var members map[string]any
	if trimmed := bytes.TrimSpace(args); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		v, err := decodeJSON(trimmed)
		if err != nil {
			return nil, err
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: arguments are not a JSON object", ErrInvalidJSON)
		}
		members = obj
	}
	kept := make(map[string]any, len(members))
	for name, v := range members {
		if v == nil || v == "" {
			continue
		}
		kept[name] = v
	}
	var b bytes.Buffer
	writeCanonical(&b, []any{session, turn, tool, kept})
	return b.Bytes(), nil
}

// CanonicalJSON rewrites one JSON value in a canonical form, so that values
// that mean the same compare equal byte for byte:
//
//   - no insignificant whitespace;
//   - object members sorted by name, comparing the names' UTF-8 bytes; a
//     repeated name is an error wrapping [ErrInvalidJSON];
//   - strings escaped minimally: '"' and '\' as \" and \\, the control
//     characters U+0008, U+0009, U+000A, U+000C, U+000D as \b \t \n \f \r,
//     every other control character below U+0020 as \u00XX (lower-case
//     hex), everything else (including '<', '>', '&' and U+2028) as its UTF-8
//     bytes; invalid UTF-8 becomes U+FFFD;
//   - numbers by their exact decimal value (never rounded through a float),
//     so 1, 1.0, 10e-1 and 1e0 are all 1, and -0 is 0. With the value written
//     as digits D (no leading or trailing zeros) times 10^E: an integer
//     below 10^21 is written as D followed by E zeros; a non-integer of at
//     least 10^-6 as a plain decimal fraction ("0.0025", "12.5"); anything
//     else as D[0], "." and the rest of D if any, "e", the sign ("+" or
//     "-") and the decimal exponent ("1e+21", "2.5e-7"), as JavaScript
//     writes numbers. A number whose exponent has more than 9 digits is an
//     error;
//   - true, false and null as themselves.
//
// Anything other than exactly one JSON value is an error wrapping
// [ErrInvalidJSON].
func CanonicalJSON(v json.RawMessage) ([]byte, error) {
	val, err := decodeJSON(v)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	writeCanonical(&b, val)
	return b.Bytes(), nil
}

// decodeJSON decodes exactly one JSON value into nil, bool, string,
// json.Number, []any and map[string]any, rejecting repeated member names.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: more than one value", ErrInvalidJSON)
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", ErrInvalidJSON, maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				nameTok, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
				}
				name, _ := nameTok.(string)
				if _, dup := obj[name]; dup {
					return nil, fmt.Errorf("%w: member %q repeated", ErrInvalidJSON, name)
				}
				val, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj[name] = val
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				val, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
			}
			return arr, nil
		}
		return nil, fmt.Errorf("%w: unexpected %v", ErrInvalidJSON, t)
	case json.Number:
		text, err := canonicalDecimal(string(t))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
		}
		return json.Number(text), nil
	case string:
		// encoding/json already replaced invalid UTF-8 with U+FFFD.
		return t, nil
	default: // nil, bool
		return t, nil
	}
}

func writeCanonical(b *bytes.Buffer, v any) {
	switch t := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case json.Number:
		b.WriteString(string(t))
	case string:
		writeCanonicalString(b, t)
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		names := make([]string, 0, len(t))
		for name := range t {
			names = append(names, name)
		}
		slices.Sort(names)
		b.WriteByte('{')
		for i, name := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonicalString(b, name)
			b.WriteByte(':')
			writeCanonical(b, t[name])
		}
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("agentkey: writeCanonical: unexpected %T", v))
	}
}

func writeCanonicalString(b *bytes.Buffer, s string) {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	const hexLower = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hexLower[c>>4])
				b.WriteByte(hexLower[c&0xf])
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

// canonicalDecimal renders a JSON number by its exact decimal value, as
// documented on [CanonicalJSON].
func canonicalDecimal(num string) (string, error) {
	neg := strings.HasPrefix(num, "-")
	num = strings.TrimPrefix(num, "-")
	mant, expText, hasExp := strings.Cut(strings.ToLower(num), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	exp := 0
	if hasExp {
		expNeg := strings.HasPrefix(expText, "-")
		expText = strings.TrimLeft(strings.TrimLeft(expText, "+-"), "0")
		if len(expText) > 9 {
			return "", fmt.Errorf("number exponent %s has more than 9 digits", expText)
		}
		for _, c := range expText {
			if c < '0' || c > '9' {
				return "", fmt.Errorf("malformed number %q", num)
			}
			exp = exp*10 + int(c-'0')
		}
		if expNeg {
			exp = -exp
		}
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	digits = trimmed
	if digits == "" {
		return "0", nil
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	point := len(digits) + exp // position of the decimal point in digits
	switch {
	case exp >= 0 && point <= 21:
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", exp))
	case exp < 0 && point > 0:
		b.WriteString(digits[:point])
		b.WriteByte('.')
		b.WriteString(digits[point:])
	case exp < 0 && point > -6:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -point))
		b.WriteString(digits)
	default:
		b.WriteByte(digits[0])
		if len(digits) > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		e := point - 1
		b.WriteByte('e')
		if e >= 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(e))
	}
	return b.String(), nil
}
