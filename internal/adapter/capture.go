package adapter

import (
	"errors"
	"net/http"
)

// Sink is what an adapter plugs into a [CaptureWriter]: the part of the
// capture that knows the adapter's answers (package middleware's body
// buffer, mcphttp's SSE scanner).
type Sink interface {
	// Begin sees the final status when the handler sends it, with the
	// header map as it is then. It reports false to hold the header back
	// from the client (the adapter sends it later itself).
	Begin(status int, h http.Header) (send bool)
	// Capture sees each write of the body before the client does, whether
	// or not the client is still there: the side effect happened, and the
	// retry of a client whose connection dropped is exactly who needs the
	// record. It reports false to hold p back: nothing is sent, and the
	// write succeeds.
	Capture(p []byte) (send bool)
	// Holding reports whether what the handler writes is held back: a
	// flush then sends nothing.
	Holding() bool
}

// CaptureWriter is the core of the response writer an adapter gives the
// handler it protects: everything the handler writes passes to the client
// (W) as it is written and flushed, and its Sink sees it on the way.
//
// The rules for a client that vanished mid-write: the first write or flush
// to W that fails (the client hung up) is kept in Gone, and later writes
// are captured and no longer sent. Unless ReportGone, the handler is not
// told: its writes succeed, it runs to completion, and its whole answer is
// captured for the client's retry. With ReportGone (the adapter's
// CancelWithClient), a write to the gone client fails with Gone, as the
// engine ends the handler's context and releases its key.
//
// It keeps [http.Flusher] working, and [http.ResponseController] reaches W
// through Unwrap (deadlines, full duplex, hijacking; a hijacked connection
// bypasses the capture).
type CaptureWriter struct {
	// W is the client's writer, or what holds the answer back for it.
	W http.ResponseWriter
	// Sink sees the status and the body.
	Sink Sink
	// Status is the final status the handler sent; 0 until it sends one.
	Status int
	// Gone is the error of the first write or flush to W that failed.
	Gone error
	// ReportGone makes writes and flushes after Gone fail with it.
	ReportGone bool
}

var (
	_ http.Flusher                              = (*CaptureWriter)(nil)
	_ interface{ FlushError() error }           = (*CaptureWriter)(nil)
	_ interface{ Unwrap() http.ResponseWriter } = (*CaptureWriter)(nil)
)

// Header returns W's header map.
func (c *CaptureWriter) Header() http.Header { return c.W.Header() }

// WriteHeader sends code. An informational status (103 Early Hints, not
// 101) is sent and is not the final one; a second final status is passed
// on for net/http to report as superfluous. While the Sink holds the
// answer back, neither is sent: nothing of the handler's reaches the
// client before the adapter sends the answer, in whatever order the
// handler calls the writer (an informational status would send the
// headers set so far; a second final one, the status line and headers
// of an answer that may still roll back). A second final status is then
// ignored, as net/http ignores it; the first is the answer's.
func (c *CaptureWriter) WriteHeader(code int) {
	switch {
	case c.Status != 0:
		// Superfluous: let net/http say so, unless held.
		if c.Sink.Holding() && !mutantHeldStatusEscapes() {
			return
		}
	case code >= 100 && code < 200 && code != http.StatusSwitchingProtocols:
		// Informational: sent unless held, not the final status, not
		// captured.
		if c.Sink.Holding() {
			return
		}
	default:
		c.Status = code
		if !c.Sink.Begin(code, c.W.Header()) {
			return
		}
	}
	c.W.WriteHeader(code)
}

// Write has the Sink capture p, then sends it unless the Sink holds it
// back or the client is gone (see [CaptureWriter]).
func (c *CaptureWriter) Write(p []byte) (int, error) {
	if c.Status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !c.Sink.Capture(p) {
		return len(p), nil
	}
	if c.Gone == nil {
		n, err := c.W.Write(p)
		if err == nil {
			return n, nil
		}
		c.Gone = err
	}
	if c.ReportGone {
		return 0, c.Gone
	}
	return len(p), nil
}

// FlushError sends what was written so far, and is what
// [http.ResponseController.Flush] calls. While the Sink holds the answer
// back, or once the client is gone, it does nothing, and reports no error
// unless ReportGone.
func (c *CaptureWriter) FlushError() error {
	if c.Status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if c.Sink.Holding() {
		return nil
	}
	if c.Gone == nil {
		err := http.NewResponseController(c.W).Flush()
		if err == nil || errors.Is(err, http.ErrNotSupported) {
			return err
		}
		c.Gone = err
	}
	if c.ReportGone {
		return c.Gone
	}
	return nil
}

// Flush implements [http.Flusher].
func (c *CaptureWriter) Flush() { _ = c.FlushError() }

// Unwrap returns W, for [http.ResponseController].
func (c *CaptureWriter) Unwrap() http.ResponseWriter { return c.W }
