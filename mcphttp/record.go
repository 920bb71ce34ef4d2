package mcphttp

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"

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
	// oversize reports that a message, or a JSON body, was larger than
	// limit and could not be looked at.
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

func (s *scanner) appendLine(p []byte) {
	if s.lineOver {
		return
	}
	if len(s.line)+len(p) > s.limit+len("data: ") {
		s.lineOver = true
		s.line = s.line[:0]
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
	case over:
		// Only a data line can be this long in practice; the event's
		// message is unknowable either way.
		s.dataLines++
		s.dataOver = true
	case string(field) == "event":
		s.event = string(value)
	case string(field) == "data":
		if s.dataLines > 0 {
			s.data = append(s.data, '\n')
		}
		s.dataLines++
		if len(s.data)+len(value) > s.limit {
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
		s.oversize = true
		return
	}
	s.consider(data)
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

// recorder is the http.ResponseWriter the inner handler writes the call's
// response to. Every byte goes straight on to the client, as it is written
// and flushed; the scanner looks at a copy to find the response to record.
// A write to a client that went away fails, but is still scanned: the
// response is recorded for the retry that client will send.
type recorder struct {
	w       http.ResponseWriter
	id      idem.RequestID
	limit   int
	status  int
	scan    *scanner
	started bool
}

var (
	_ http.Flusher = (*recorder)(nil)
	_ interface {
		Unwrap() http.ResponseWriter
	} = (*recorder)(nil)
)

func (r *recorder) Header() http.Header { return r.w.Header() }

func (r *recorder) WriteHeader(code int) {
	if r.started {
		return
	}
	if code >= 100 && code < 200 {
		r.w.WriteHeader(code) // informational: the real header follows
		return
	}
	r.started = true
	r.status = code
	r.scan = newScanner(r.id, r.limit, r.w.Header().Get("Content-Type"))
	r.w.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.started {
		r.WriteHeader(http.StatusOK)
	}
	r.scan.write(p)
	return r.w.Write(p)
}

// Flush flushes the client's connection, so SSE events reach it as they are
// written.
func (r *recorder) Flush() {
	if !r.started {
		r.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(r.w).Flush()
}

// Unwrap lets http.ResponseController reach the client's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

// outcome is how the call ended, as far as the response shows.
func (r *recorder) outcome() (final []byte, isError, oversize bool) {
	if r.scan == nil {
		return nil, false, false
	}
	r.scan.finish()
	return r.scan.final, r.scan.finalError, r.scan.oversize
}

// capture is the http.ResponseWriter of a probe: it keeps everything in
// memory, bounded, and sends nothing to the client.
type capture struct {
	header http.Header
	status int
	body   bytes.Buffer
	limit  int
}

func newCapture(limit int) *capture {
	return &capture{header: http.Header{}, limit: limit}
}

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(code int) {
	if c.status == 0 && code >= 200 {
		c.status = code
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if room := c.limit - c.body.Len(); room > 0 {
		c.body.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capture) Flush() {
	if c.status == 0 {
		c.status = http.StatusOK
	}
}
