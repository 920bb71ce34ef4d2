package idem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// ErrInvalidRequestID is returned by [ParseRequestID] for JSON that is not a
// JSON-RPC request id: null, a boolean, an object, an array, or not JSON.
var ErrInvalidRequestID = errors.New("idem: invalid JSON-RPC request id")

// RequestID is a JSON-RPC request id: a number or a string.
//
// Its [RequestID.String] rendering is what keys are built from, and it is
// chosen so that a numeric id and a string id that print the same are the
// same id: 1 and "1" render as "1". That is the JSON-RPC reading of an id:
// whatever appears in the id member, repeated exactly by a retrying client.
//
// The zero RequestID is not a valid id; [RequestID.IsZero] reports it.
type RequestID struct {
	text     string // the canonical rendering
	isString bool   // whether the id arrived as a JSON string
	valid    bool
}

// StringRequestID returns the request id carried as the JSON string s.
func StringRequestID(s string) RequestID {
	return RequestID{text: s, isString: true, valid: true}
}

// IntRequestID returns the request id carried as the JSON number n.
func IntRequestID(n int64) RequestID {
	return RequestID{text: strconv.FormatInt(n, 10), valid: true}
}

// ParseRequestID parses the raw JSON value of a JSON-RPC id member.
//
// Numbers render canonically: integers in decimal without sign of zero or
// leading zeros (so 1, 1.0 and 1e0 are one id), other numbers in Go's
// shortest 'g' form. Anything but a number or a string, including null, is
// rejected with an error wrapping [ErrInvalidRequestID]: a request whose id
// is null cannot be told apart from any other such request, so it cannot be
// deduplicated.
func ParseRequestID(raw json.RawMessage) (RequestID, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return RequestID{}, fmt.Errorf("%w: empty", ErrInvalidRequestID)
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return RequestID{}, fmt.Errorf("%w: %v", ErrInvalidRequestID, err)
		}
		return StringRequestID(s), nil
	case c == '-' || (c >= '0' && c <= '9'):
		var n json.Number
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&n); err != nil || dec.More() {
			return RequestID{}, fmt.Errorf("%w: malformed number %q", ErrInvalidRequestID, raw)
		}
		text, err := canonicalNumber(string(n))
		if err != nil {
			return RequestID{}, fmt.Errorf("%w: %v", ErrInvalidRequestID, err)
		}
		return RequestID{text: text, valid: true}, nil
	default:
		return RequestID{}, fmt.Errorf("%w: %.32s is not a number or a string", ErrInvalidRequestID, raw)
	}
}

// Bounds on numeric ids, see canonicalNumber.
const (
	maxNumberLen = 256
	maxExponent  = 1000
)

// canonicalNumber renders a JSON number exactly, so that numerically equal
// numbers print the same: integers in decimal (1, 1.0, 1e0 and 10e-1 are
// "1"), others as their exact decimal expansion without trailing zeros.
// The arithmetic is exact (big.Rat): two different numbers never render the
// same, however many digits they have.
func canonicalNumber(s string) (string, error) {
	// Bound the work a client-chosen id can cause: a long literal costs
	// superlinear time to convert, and a large exponent (199e99999999)
	// would expand to millions of digits. Ids beyond these bounds are not
	// ids anyone sends.
	if len(s) > maxNumberLen {
		return "", fmt.Errorf("number longer than %d characters", maxNumberLen)
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		if exp, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+")); err != nil || exp > maxExponent || exp < -maxExponent {
			return "", fmt.Errorf("number %.32q: exponent out of range", s)
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "", fmt.Errorf("malformed number %.32q", s)
	}
	var text string
	if r.IsInt() {
		text = r.Num().String()
	} else {
		// A JSON number's denominator is 2^a·5^b with a, b below the
		// literal's digits plus its exponent, so this many places are
		// exact.
		text = strings.TrimRight(r.FloatString(maxNumberLen+maxExponent), "0")
	}
	// The rendering must itself parse back (MarshalJSON writes it).
	if len(text) > maxNumberLen {
		return "", fmt.Errorf("number %.32q: more than %d digits", s, maxNumberLen)
	}
	return text, nil
}

// String renders the id as keys use it: a string id as itself, a number in
// canonical form.
func (id RequestID) String() string { return id.text }

// IsString reports whether the id arrived as a JSON string.
func (id RequestID) IsString() bool { return id.isString }

// IsZero reports whether id is the zero RequestID, which no request carries.
func (id RequestID) IsZero() bool { return !id.valid }

// MarshalJSON renders the id as JSON: a string id as a JSON string, a number
// in its canonical form.
func (id RequestID) MarshalJSON() ([]byte, error) {
	if !id.valid {
		return nil, fmt.Errorf("%w: zero RequestID", ErrInvalidRequestID)
	}
	if id.isString {
		return json.Marshal(id.text)
	}
	return []byte(id.text), nil
}

// UnmarshalJSON parses id with [ParseRequestID].
func (id *RequestID) UnmarshalJSON(b []byte) error {
	parsed, err := ParseRequestID(b)
	if err != nil {
		return err
	}
	*id = parsed
	return nil
}

// SessionID names the session a request belongs to: an MCP session id, or a
// conversation's _meta.sessionId. It is opaque; any string is allowed.
type SessionID string
