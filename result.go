package idem

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/jsonb"
)

// Result is what a completed key replays: for HTTP the response, for MCP the
// JSON-RPC response (as Body).
//
// It serialises to a JSON object that survives PostgreSQL's jsonb exactly:
//
//	{"status": 201, "header": {"Content-Type": ["application/json"]},
//	 "body": "{\"id\":1}"}
//
// The body is a JSON string when it is valid UTF-8 without NUL bytes (jsonb
// strings are stored verbatim, and this keeps results readable in psql), and
// "body_base64" otherwise. Body bytes are never reinterpreted as JSON, because
// jsonb would reorder and reformat them and a replay must be byte for byte.
// Headers are kept the same way: "header" when every name and value is
// valid UTF-8 without NUL (the common case), otherwise "header_base64", the
// same map with every name and value base64-encoded, since jsonb refuses
// \u0000 and encoding/json would replace invalid UTF-8.
type Result struct {
	// Status is the HTTP status code. Zero means none was recorded.
	Status int
	// Header holds the recorded response headers, canonical names. Nil
	// means none.
	Header map[string][]string
	// Body is the recorded response body. Nil and empty are the same.
	Body []byte
	// Unreplayable marks a key that completed without a replayable result,
	// for example because the response was larger than the record limit.
	// A retry must not run the side effect again, and cannot be given the
	// original answer; adapters answer it with a documented error.
	Unreplayable bool
}

// resultJSON is what UnmarshalJSON decodes into. The body fields stay raw:
// decoding them as strings would copy a large body three times, where
// unquoting the raw bytes in place copies it once.
type resultJSON struct {
	Status       int                 `json:"status,omitempty"`
	Header       map[string][]string `json:"header,omitempty"`
	HeaderBase64 map[string][]string `json:"header_base64,omitempty"`
	Body         json.RawMessage     `json:"body,omitempty"`
	BodyBase64   json.RawMessage     `json:"body_base64,omitempty"`
	Unreplayable bool                `json:"unreplayable,omitempty"`
}

// MarshalJSON encodes r as documented on [Result]. It writes the JSON by
// hand into one buffer sized up front, escaping the body in place: a result
// can be megabytes, and the generic encoder would copy it three times
// (string conversion, encoding, growth).
func (r Result) MarshalJSON() ([]byte, error) {
	header := r.Header
	headerField := "header"
	if header != nil && !headerIsText(header) {
		header, headerField = headerBase64(header), "header_base64"
	}
	text := jsonb.IsText(r.Body)
	size := len(`{"status":,"header_base64":,"body_base64":"","unreplayable":true}`) + 20 + headerJSONSize(header)
	if text {
		size += len(r.Body) + len(r.Body)/16 // room for a few escapes
	} else {
		size += base64.StdEncoding.EncodedLen(len(r.Body))
	}
	b := make([]byte, 0, size)
	sep := byte('{')
	field := func(name string) {
		b = append(b, sep, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		sep = ','
	}
	if r.Status != 0 {
		field("status")
		b = strconv.AppendInt(b, int64(r.Status), 10)
	}
	if r.Header != nil {
		field(headerField)
		b = appendHeaderJSON(b, header)
	}
	switch {
	case len(r.Body) == 0:
	case text:
		field("body")
		b = appendJSONString(b, r.Body)
	default:
		field("body_base64")
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, r.Body)
		b = append(b, '"')
	}
	if r.Unreplayable {
		field("unreplayable")
		b = append(b, "true"...)
	}
	if sep == '{' {
		b = append(b, '{')
	}
	return append(b, '}'), nil
}

func headerIsText(h map[string][]string) bool {
	for k, vs := range h {
		if !jsonb.IsText(k) {
			return false
		}
		for _, v := range vs {
			if !jsonb.IsText(v) {
				return false
			}
		}
	}
	return true
}

// appendHeaderJSON appends h as encoding/json encodes it, byte for byte
// (keys sorted, strings escaped as [appendJSONStringHTMLSafe] does), without
// the reflection and copies of json.Marshal. h is not nil.
func appendHeaderJSON(b []byte, h map[string][]string) []byte {
	var stack [16]string
	keys := stack[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendJSONStringHTMLSafe(b, k), ':')
		b = appendJSONStrings(b, h[k])
	}
	return append(b, '}')
}

// appendJSONStrings appends vs as encoding/json encodes a []string: null
// when vs is nil, else an array of strings escaped as
// [appendJSONStringHTMLSafe] escapes them.
func appendJSONStrings(b []byte, vs []string) []byte {
	if vs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONStringHTMLSafe(b, v)
	}
	return append(b, ']')
}

// headerJSONSize is about the size of h's encoding, for the buffer's
// capacity: a few escapes beyond it only make the buffer grow once.
func headerJSONSize(h map[string][]string) int {
	if h == nil {
		return 0
	}
	n := 2
	for k, vs := range h {
		n += len(k) + 6
		for _, v := range vs {
			n += len(v) + 3
		}
	}
	return n
}

// appendJSONStringHTMLSafe appends s quoted as encoding/json quotes a string
// (with its default HTML escaping): <, > and & as \u003c, \u003e and \u0026,
// U+2028 and U+2029 escaped, invalid UTF-8 as \ufffd, \b and \f short.
func appendJSONStringHTMLSafe(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = appendASCIIEscape(b, c, hex)
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func headerBase64(h map[string][]string) map[string][]string {
	enc := base64.StdEncoding.EncodeToString
	out := make(map[string][]string, len(h))
	for k, vs := range h {
		ev := make([]string, len(vs))
		for i, v := range vs {
			ev[i] = enc([]byte(v))
		}
		out[enc([]byte(k))] = ev
	}
	return out
}

func headerFromBase64(h map[string][]string) (map[string][]string, error) {
	dec := base64.StdEncoding.DecodeString
	out := make(map[string][]string, len(h))
	for ek, evs := range h {
		k, err := dec(ek)
		if err != nil {
			return nil, err
		}
		vs := make([]string, len(evs))
		for i, ev := range evs {
			v, err := dec(ev)
			if err != nil {
				return nil, err
			}
			vs[i] = string(v)
		}
		out[string(k)] = vs
	}
	return out, nil
}

// appendASCIIEscape appends the JSON escape of the ASCII byte c: a quote or
// backslash escaped, \n, \r and \t short, any other as \u00XX in the digits
// hex.
func appendASCIIEscape(b []byte, c byte, hex string) []byte {
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
}

// appendJSONString appends s, valid UTF-8, as a JSON string: quotes,
// backslashes and control characters escaped, everything else as is.
func appendJSONString(b, s []byte) []byte {
	b = append(b, '"')
	start := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = appendASCIIEscape(append(b, s[start:i]...), c, hexDigits)
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// UnmarshalJSON decodes what [Result.MarshalJSON] encodes (and any other
// valid JSON of the same shape, such as jsonb's rendering of it).
func (r *Result) UnmarshalJSON(b []byte) error {
	var j resultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("idem: decoding result: %w", err)
	}
	*r = Result{Status: j.Status, Header: j.Header, Unreplayable: j.Unreplayable}
	if j.HeaderBase64 != nil {
		if j.Header != nil {
			return fmt.Errorf("idem: decoding result: both header and header_base64")
		}
		h, err := headerFromBase64(j.HeaderBase64)
		if err != nil {
			return fmt.Errorf("idem: decoding result header: %w", err)
		}
		r.Header = h
	}
	hasBody, hasBase64 := j.Body != nil && string(j.Body) != "null", j.BodyBase64 != nil && string(j.BodyBase64) != "null"
	switch {
	case hasBody && hasBase64:
		return fmt.Errorf("idem: decoding result: both body and body_base64")
	case hasBody:
		body, err := unquoteInPlace(j.Body)
		if err != nil {
			return fmt.Errorf("idem: decoding result body: %w", err)
		}
		r.Body = body
	case hasBase64:
		enc, err := unquoteInPlace(j.BodyBase64)
		if err != nil {
			return fmt.Errorf("idem: decoding result body: %w", err)
		}
		n, err := base64.StdEncoding.Decode(enc, enc) // decoding shrinks: in place is safe
		if err != nil {
			return fmt.Errorf("idem: decoding result body: %w", err)
		}
		r.Body = enc[:n]
	}
	return nil
}

// unquoteInPlace decodes the JSON string q (quotes included, already
// validated by the JSON decoder) into q's own memory and returns the
// decoded bytes. Every escape is longer than what it decodes to, so the
// write position never passes the read position. Invalid surrogates decode
// to U+FFFD, as encoding/json does; bytes outside escapes are kept as they
// are (MarshalJSON writes a body as a string only when it is valid UTF-8).
func unquoteInPlace(q []byte) ([]byte, error) {
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return nil, fmt.Errorf("not a JSON string")
	}
	s := q[1 : len(q)-1]
	w := 0
	for r := 0; r < len(s); {
		c := s[r]
		if c != '\\' {
			s[w] = c
			w++
			r++
			continue
		}
		if r+1 >= len(s) {
			return nil, fmt.Errorf("truncated escape")
		}
		switch e := s[r+1]; e {
		case '"', '\\', '/':
			s[w] = e
		case 'b':
			s[w] = '\b'
		case 'f':
			s[w] = '\f'
		case 'n':
			s[w] = '\n'
		case 'r':
			s[w] = '\r'
		case 't':
			s[w] = '\t'
		case 'u':
			rn, n := decodeUEscape(s[r:])
			if n == 0 {
				return nil, fmt.Errorf("bad \\u escape")
			}
			w += utf8.EncodeRune(s[w:], rn)
			r += n
			continue
		default:
			return nil, fmt.Errorf("bad escape \\%c", e)
		}
		w++
		r += 2
	}
	return s[:w], nil
}

// decodeUEscape decodes a \uXXXX escape at the start of s, or a surrogate
// pair of two, and returns the rune and the bytes consumed (0: malformed).
func decodeUEscape(s []byte) (rune, int) {
	hex4 := func(b []byte) rune {
		if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
			return -1
		}
		v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(v)
	}
	r1 := hex4(s)
	switch {
	case r1 < 0:
		return 0, 0
	case utf16.IsSurrogate(r1):
		if r2 := hex4(s[6:]); r2 >= 0 {
			if rn := utf16.DecodeRune(r1, r2); rn != utf8.RuneError {
				return rn, 12
			}
		}
		return utf8.RuneError, 6
	}
	return r1, 6
}

// Equal reports whether r and o replay the same: same status, headers, body
// bytes and replayability. Nil and empty bodies and header maps are equal.
func (r Result) Equal(o Result) bool {
	if r.Status != o.Status || r.Unreplayable != o.Unreplayable || !bytes.Equal(r.Body, o.Body) || len(r.Header) != len(o.Header) {
		return false
	}
	for k, vs := range r.Header {
		ws, ok := o.Header[k]
		if !ok || len(vs) != len(ws) {
			return false
		}
		for i := range vs {
			if vs[i] != ws[i] {
				return false
			}
		}
	}
	return true
}
