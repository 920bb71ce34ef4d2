package mcphttp

import (
	"bytes"
	"encoding/json"
	"mime"

	"github.com/idemkit/idem"
)

// scanner finds the JSON-RPC response to one request id in what an inner
// handler writes, in either framing of the Streamable HTTP transport: an SSE
// stream (text/event-stream) whose "message" events each carry one JSON-RPC
// message, or a single JSON body (application/json) holding one message or
// an array of them. It never holds more than limit bytes of one message:
// progress notifications, log messages and server-to-client requests
// interleaved on an SSE stream are looked at one event at a time and
// dropped.
type scanner struct {
	id    idem.RequestID
	limit int
	sse   bool

	// SSE state: the current line and the current event.
	line      []byte
	lineOver  bool // the current line exceeded the limit
	event     string
	data      []byte
	dataLines int
	dataOver  bool

	body []byte // JSON mode: the body so far, up to limit

	final      []byte // the call's response, once seen
	finalError bool
	// oversize reports that the call's response was larger than limit
	// and could not be recorded: a JSON body over the limit, or an SSE
	// message over the limit that is not a request or notification (it
	// names no top-level "method" within its first limit bytes).
	// Notifications over the limit are dropped without a trace: they say
	// nothing about the response.
	oversize bool
}

func newScanner(id idem.RequestID, limit int, contentType string) *scanner {
	mt, _, _ := mime.ParseMediaType(contentType)
	return &scanner{id: id, limit: limit, sse: mt == "text/event-stream"}
}

func (s *scanner) write(p []byte) {
	if !s.sse {
		if len(s.body)+len(p) > s.limit {
			s.oversize = true
			s.body = nil
			return
		}
		if !s.oversize {
			s.body = append(s.body, p...)
		}
		return
	}
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.appendLine(p)
			return
		}
		s.appendLine(p[:i])
		s.endLine()
		// A CRLF pair ends one line; a lone CR or LF ends one line each.
		if p[i] == '\r' && i+1 < len(p) && p[i+1] == '\n' {
			i++
		}
		p = p[i+1:]
	}
}

// The SSE parser ignores the case of a CRLF split across two writes: the LF
// then ends an empty line and dispatches the event early. go-sdk and every
// MCP server seen end lines with LF alone.

// appendLine adds p to the current line, keeping at most its first
// limit+len("data: ") bytes: enough to tell what an oversized message is.
func (s *scanner) appendLine(p []byte) {
	if s.lineOver {
		return
	}
	if room := s.limit + len("data: ") - len(s.line); len(p) > room {
		s.line = append(s.line, p[:room]...)
		s.lineOver = true
		return
	}
	s.line = append(s.line, p...)
}

func (s *scanner) endLine() {
	line, over := s.line, s.lineOver
	s.line, s.lineOver = s.line[:0], false
	if len(line) == 0 && !over {
		s.dispatch()
		return
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		value = bytes.TrimPrefix(value, []byte(" "))
	}
	switch {
	case over && string(field) != "data":
		// Only a data line can be this long in practice; the event's
		// message is unknowable.
		s.dataLines++
		s.dataOver = true
	case string(field) == "event":
		s.event = string(value)
	case string(field) == "data":
		if s.dataLines > 0 && len(s.data) < s.limit {
			s.data = append(s.data, '\n')
		}
		s.dataLines++
		if room := s.limit - len(s.data); over || len(value) > room {
			// Keep the message's first limit bytes: they tell a
			// notification from the response.
			s.data = append(s.data, value[:min(len(value), max(room, 0))]...)
			s.dataOver = true
			return
		}
		s.data = append(s.data, value...)
	}
}

func (s *scanner) dispatch() {
	event, data, over, lines := s.event, s.data, s.dataOver, s.dataLines
	s.event, s.data, s.dataOver, s.dataLines = "", s.data[:0], false, 0
	if lines == 0 || (event != "" && event != "message") {
		return
	}
	if over {
		if !namesMethod(data) {
			s.oversize = true
		}
		return
	}
	s.consider(data)
}

// namesMethod reports whether the JSON object that prefix begins (possibly
// cut off) has a top-level "method" member within prefix: it is a request
// or a notification, not a response.
func namesMethod(prefix []byte) bool {
	depth, isKey, expectKey, inString, start, found := 0, false, false, false, 0, false
	structure(prefix, func(i int, c byte) bool {
		switch {
		case c == '"' && !inString: // a string opens at i
			inString, start = true, i+1
			isKey = depth == 1 && expectKey
		case c == '"': // the string that opened at start closes at i
			inString = false
			found = isKey && string(prefix[start:i]) == "method"
		}
		switch c {
		case '{', '[':
			depth++
			expectKey = depth == 1 && c == '{'
		case '}', ']':
			depth--
		case ',':
			expectKey = depth == 1
		case ':':
			if depth == 1 {
				expectKey = false
			}
		}
		return !found
	})
	return found
}

// structure calls fn with each byte of the JSON text p (possibly cut off)
// that is outside a string and its index, and for each string with '"' at
// its opening quote and '\” at its closing one, until fn returns false.
// It does not check that p is JSON.
func structure(p []byte, fn func(i int, c byte) bool) {
	inString, escaped := false, false
	for i, c := range p {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if !fn(i, c) {
					return
				}
			}
			continue
		}
		if c == '"' {
			inString = true
		}
		if !fn(i, c) {
			return
		}
	}
}

func (s *scanner) consider(msg []byte) {
	if s.final != nil {
		return
	}
	if ok, isErr := responseTo(msg, s.id); ok {
		s.final = append([]byte(nil), msg...)
		s.finalError = isErr
	}
}

// finish looks at a JSON body once it is complete.
func (s *scanner) finish() {
	if s.sse || s.oversize {
		return
	}
	body := bytes.TrimSpace(s.body)
	if len(body) > 0 && body[0] == '[' {
		var msgs []json.RawMessage
		if json.Unmarshal(body, &msgs) == nil {
			for _, m := range msgs {
				s.consider(m)
			}
		}
		return
	}
	s.consider(body)
}
