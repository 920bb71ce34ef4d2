package idem

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"
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

type resultJSON struct {
	Status       int                 `json:"status,omitempty"`
	Header       map[string][]string `json:"header,omitempty"`
	Body         *string             `json:"body,omitempty"`
	BodyBase64   *string             `json:"body_base64,omitempty"`
	Unreplayable bool                `json:"unreplayable,omitempty"`
}

// MarshalJSON encodes r as documented on [Result].
func (r Result) MarshalJSON() ([]byte, error) {
	j := resultJSON{Status: r.Status, Header: r.Header, Unreplayable: r.Unreplayable}
	if len(r.Body) > 0 {
		if utf8.Valid(r.Body) && bytes.IndexByte(r.Body, 0) < 0 {
			s := string(r.Body)
			j.Body = &s
		} else {
			s := base64.StdEncoding.EncodeToString(r.Body)
			j.BodyBase64 = &s
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what [Result.MarshalJSON] encodes.
func (r *Result) UnmarshalJSON(b []byte) error {
	var j resultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("idem: decoding result: %w", err)
	}
	*r = Result{Status: j.Status, Header: j.Header, Unreplayable: j.Unreplayable}
	switch {
	case j.Body != nil && j.BodyBase64 != nil:
		return fmt.Errorf("idem: decoding result: both body and body_base64")
	case j.Body != nil:
		r.Body = []byte(*j.Body)
	case j.BodyBase64 != nil:
		body, err := base64.StdEncoding.DecodeString(*j.BodyBase64)
		if err != nil {
			return fmt.Errorf("idem: decoding result body: %w", err)
		}
		r.Body = body
	}
	return nil
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
