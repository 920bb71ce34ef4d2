package mcphttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
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
	gone    bool // a write to the client failed: it hung up
	// work is the engine's context of the call's work; nil means one
	// never cut off.
	work context.Context
	// inner is the inner request's context, which ends before the
	// recorder is done only when the wrapper ends it (errInnerCutOff) or,
	// with Options.CancelWithClient, when the client goes away; nil means
	// it never does.
	inner context.Context
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

// Write scans p and sends it. Once the client is gone, p is still scanned
// but no longer sent, and the inner handler is not told: the call runs to
// completion and its response is recorded for the client's retry.
func (r *recorder) Write(p []byte) (int, error) {
	if !r.started {
		r.WriteHeader(http.StatusOK)
	}
	r.scan.write(p)
	if !r.gone {
		if _, err := r.w.Write(p); err != nil {
			r.gone = true
		}
	}
	return len(p), nil
}

// Flush flushes the client's connection, so SSE events reach it as they are
// written.
func (r *recorder) Flush() {
	if !r.started {
		r.WriteHeader(http.StatusOK)
	}
	if !r.gone {
		_ = http.NewResponseController(r.w).Flush()
	}
}

// Unwrap lets http.ResponseController reach the client's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

// verdict is how the call ended, as far as its answer shows, for the
// engine.
func (r *recorder) verdict() engine.Verdict {
	if r.inner != nil && r.inner.Err() != nil && !errors.Is(context.Cause(r.inner), errInnerCutOff) &&
		(r.scan == nil || r.scan.final == nil && !r.scan.oversize) {
		// Options.CancelWithClient, and the client went away: the
		// cancellation it asked for, of a tool that stops cleanly, ended
		// the call before it answered, so the retry runs it again.
		return engine.Verdict{Action: engine.Release, Why: "the call's client went away before it answered, which cancelled it"}
	}
	if r.scan == nil {
		// Not even a status line: the inner handler may have accepted the
		// call and lost its answer. go-sdk does so when the session closes
		// while the call runs, or the call's request context ends (the
		// wrapper ends it a lease after a cut-off): the tool finishes, its
		// result is dropped, and the POST ends without a byte. The tool may
		// have run, so the claim is left to its lease, as for a stream
		// that ended early; releasing it would let the retry run the tool
		// again at once. A handler that refuses a call says so with a
		// status.
		return engine.Verdict{Action: engine.Leave, Why: "the inner handler answered nothing: the call may have run"}
	}
	r.scan.finish()
	switch s := r.scan; {
	case s.final != nil && !s.finalError && r.work != nil && r.work.Err() != nil && isToolError(s.final):
		// The call was cut off (Options.CancelWithClient) and its tool
		// answered with an error: go-sdk makes a tool's returned error,
		// such as its context's, a result with isError. That is an
		// artefact of the cancellation, not the call's result: the retry
		// runs the tool again.
		return engine.Verdict{Action: engine.Release, Why: "the call was cut off and its tool answered with an error"}
	case s.final != nil && !s.finalError:
		return engine.Verdict{Action: engine.Record, Result: idem.Result{Status: r.status, Body: s.final}}
	case s.final == nil && s.oversize && r.status == http.StatusOK:
		// The response was seen, and was too large to record: the tool
		// ran, and must not run again.
		return engine.Verdict{Action: engine.Record, Result: idem.Result{Status: r.status, Unreplayable: true}}
	case s.final == nil && r.status == http.StatusOK && s.sse:
		// The call's SSE stream ended without its response: the session
		// closed, or the server closed the stream for the client to
		// resume it elsewhere (SEP-1699, see the package doc). The tool may still be running,
		// so the claim is kept, unrenewed, until its lease runs out:
		// until then a retry waits or is told to retry, and never runs
		// the tool alongside. Releasing would invite exactly that.
		return engine.Verdict{Action: engine.Leave, Why: "the call's stream ended without its response"}
	}
	// A JSON-RPC error, or a status and no answer to the call (the inner
	// handler rejected the request): the call produced no result, and a
	// retry runs it again.
	return engine.Verdict{Action: engine.Release, Why: "the call answered an error, or was refused"}
}

// isToolError reports whether a JSON-RPC response is a tool result with
// isError set.
func isToolError(resp []byte) bool {
	var r struct {
		Result struct {
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	return json.Unmarshal(resp, &r) == nil && r.Result.IsError
}

// cutOff answers the call, once the inner handler returned without its
// response after the engine cut it off (cause), with a JSON-RPC error the
// client can act on: the call may still be running, or have run, and its
// claim is left to its lease, so a retry with the same key gets its result
// or, once the lease ran out, runs it. It is framed as the inner handler
// framed its answer: an SSE event, appended to the stream if it began, or
// a JSON body if nothing was sent yet. A JSON body already begun is left
// as it is.
func (r *recorder) cutOff(rawID json.RawMessage, cause error, retryAfter time.Duration) {
	why := "its deadline passed"
	switch {
	case errors.Is(cause, idem.ErrLeaseLost):
		why = "its idempotency claim was lost"
	case errors.Is(cause, engine.ErrShutdown):
		why = "the server is shutting down"
	}
	body := errorResponse(rawID, rpcError{
		Code:    CodeInFlight,
		Message: "the call was cut off before it answered (" + why + "); it may still be running: retry it with the same id or _meta.idempotencyKey to get its result",
		Data:    errorData{Reason: ReasonCutOff, Type: TypeInProgress, RetryAfterMs: retryAfter.Milliseconds()},
	})
	sse := r.scan != nil && r.scan.sse || r.scan == nil && isSSE(r.w.Header().Get("Content-Type"))
	switch {
	case sse:
		var b bytes.Buffer
		b.WriteString("event: message\ndata: ")
		b.Write(body)
		b.WriteString("\n\n")
		_, _ = r.Write(b.Bytes())
		r.Flush()
	case r.scan == nil:
		r.w.Header().Set("Content-Type", "application/json")
		r.w.Header().Del("Content-Length")
		_, _ = r.Write(body)
	}
}
