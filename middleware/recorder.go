package middleware

import (
	"maps"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/adapter"
)

// recorder is the response writer the handler sees: the adapters' capture
// core ([adapter.CaptureWriter]: the status, Flusher, the rules for a
// client that vanished mid-write) with the middleware's body buffer as its
// Sink. Everything the handler writes goes straight through to the client
// (nothing is held back, except with Options.InTransaction: see held), and
// is captured on the way for the record: the status, the allow-listed
// headers as they were when the header was sent, and the body up to the
// record limit. The captured body is the only copy the middleware makes of
// it; it becomes the recorded Result's body as is.
type recorder struct {
	adapter.CaptureWriter
	cfg *config

	header   map[string][]string // recorded headers, snapshotted when sent
	body     []byte
	overflow bool  // the body outgrew the record limit; body is dropped
	length   int64 // the declared Content-Length, or -1
	written  int64 // body bytes the handler wrote
	// held, with Options.InTransaction, holds the response back from the
	// client until the claim's transaction has committed.
	held *held
}

// init makes rw the recorder of a response to w. (A call holds its
// recorder by value, so that one allocation makes both.)
func (rw *recorder) init(w http.ResponseWriter, cfg *config) {
	*rw = recorder{cfg: cfg}
	rw.CaptureWriter = adapter.CaptureWriter{W: w, Sink: rw, ReportGone: cfg.engine.CancelWithClient}
}

// held is a response held back until the claim's transaction commits
// (Options.InTransaction): the client must not see an answer whose side
// effects and record may still roll back. The status and body are the
// recorder's capture; the headers are in the writer's header map.
type held struct {
	// before is the writer's header map as it was before the handler ran,
	// put back for the failure answer that replaces a response whose
	// transaction did not commit.
	before http.Header
	// header is the writer's header map as it was when the handler sent
	// its status (nil before): what the answer carries, as net/http sends
	// the header map of that moment, whatever the handler sets after it.
	header http.Header
	// call is the call whose response is held, which commits the
	// claim's transaction early (commitEarly) when the response outgrows
	// the record limit. A pointer, not a func bound to the call, which
	// would be an allocation of its own.
	call *call
	// sent: the hold is over and the response passes through (it was
	// spilled, or Commit answered).
	sent bool
	// failed: the spill's commit failed; nothing the handler writes may
	// reach the client.
	failed bool
}

// sendHeader puts the header map of the moment the handler sent its status
// back into w's, for the held answer to carry; a handler that sent none
// answers with the map as it is.
func (h *held) sendHeader(w http.ResponseWriter) {
	if h.header != nil {
		setHeader(w, h.header)
	}
}

// setHeader makes w's header map h.
func setHeader(w http.ResponseWriter, h http.Header) {
	hd := w.Header()
	clear(hd)
	maps.Copy(hd, h)
}

// Holding reports whether what the handler writes is held back.
func (rw *recorder) Holding() bool { return rw.held != nil && !rw.held.sent }

var (
	_ http.Flusher                              = (*recorder)(nil)
	_ interface{ FlushError() error }           = (*recorder)(nil)
	_ interface{ Unwrap() http.ResponseWriter } = (*recorder)(nil)
)

// Begin snapshots the recorded headers as they are when the status is
// sent, and holds the header back while the response is held.
func (rw *recorder) Begin(_ int, h http.Header) bool {
	rw.header = rw.cfg.snapshot(h)
	if rw.Holding() {
		rw.held.header = h.Clone()
	}
	rw.length = -1
	// A declared length lets the capture buffer be allocated once.
	if cl := h.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			rw.length = n
			if n > 0 && n <= int64(rw.cfg.maxRecord) {
				rw.body = make([]byte, 0, n)
			}
		}
	}
	return !rw.Holding()
}

// Capture captures p up to the record limit. While the response is held,
// p is held too, until it outgrows the limit: then the hold ends (spill),
// or, if the spill's commit failed, everything after it is dropped.
func (rw *recorder) Capture(p []byte) bool {
	rw.written += int64(len(p))
	if rw.Holding() {
		switch {
		case rw.held.failed:
			// The early commit failed, once: nothing more reaches the
			// client, and nothing is tried again.
			return false
		case len(rw.body)+len(p) <= rw.cfg.maxRecord:
			rw.body = append(rw.body, p...)
			return false
		}
		if rw.spill(); rw.held.failed {
			return false
		}
	}
	if !rw.overflow {
		if len(rw.body)+len(p) > rw.cfg.maxRecord {
			rw.overflow, rw.body = true, nil
		} else {
			rw.body = append(rw.body, p...)
		}
	}
	return true
}

// spill ends the hold of a response that outgrew the record limit: the
// claim's transaction commits with an unreplayable result (the side effect
// happened; the answer cannot be replayed), then what was held goes to the
// client and the rest passes through. If the commit fails, nothing reaches
// the client: the middleware answers 503 once the handler returns.
func (rw *recorder) spill() {
	if err := rw.held.call.commitEarly(idem.Result{Status: rw.Status, Unreplayable: true}); err != nil {
		rw.held.failed = true
		return
	}
	rw.held.sent = true
	body := rw.body
	rw.overflow, rw.body = true, nil
	rw.held.sendHeader(rw.W)
	rw.W.WriteHeader(rw.Status)
	if _, err := rw.W.Write(body); err != nil {
		rw.Gone = err
	}
}

// declared reports whether the response declared its length.
func (rw *recorder) declared() bool { return rw.Status != 0 && rw.length >= 0 }

// whole reports whether the handler wrote the length it declared, if it
// declared one: a shorter (or longer) body is a broken response.
func (rw *recorder) whole() bool { return !rw.declared() || rw.written == rw.length }

// result returns what was captured, as the store records it. A handler that
// wrote nothing answered 200 with an empty body, which net/http sends when it
// returns.
func (rw *recorder) result() idem.Result {
	if rw.Status == 0 {
		rw.Status, rw.length = http.StatusOK, -1
		rw.header = rw.cfg.snapshot(rw.W.Header())
	}
	if rw.overflow {
		return idem.Result{Status: rw.Status, Unreplayable: true}
	}
	return idem.Result{Status: rw.Status, Header: rw.header, Body: rw.body}
}
