package middleware

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
)

// recorder is the response writer the handler sees. Everything the handler
// writes goes straight through to the client (nothing is held back, except
// with Options.InTransaction: see held), and is captured on the way for the
// record: the status, the allow-listed headers as
// they were when the header was sent, and the body up to the record limit.
// The captured body is the only copy the middleware makes of it; it becomes
// the recorded Result's body as is.
type recorder struct {
	w   http.ResponseWriter
	cfg *config

	status   int                 // 0 until the header is sent
	header   map[string][]string // recorded headers, snapshotted when sent
	body     []byte
	overflow bool  // the body outgrew the record limit; body is dropped
	length   int64 // the declared Content-Length, or -1
	written  int64 // body bytes the handler wrote
	// gone is the error of the first write to the client that failed:
	// the client hung up. Later writes are not sent.
	gone error
	// held, with Options.InTransaction, holds the response back from the
	// client until the claim's transaction has committed.
	held *held
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
	// spill commits the claim's transaction with res, an unreplayable
	// result, when the response outgrows the record limit and cannot be
	// held any longer.
	spill func(res idem.Result) error
	// sent: the hold is over and the response passes through (it was
	// spilled, or Commit answered).
	sent bool
	// failed: the spill's commit failed; nothing the handler writes may
	// reach the client.
	failed bool
}

// holding reports whether what the handler writes is held back.
func (rw *recorder) holding() bool { return rw.held != nil && !rw.held.sent }

var (
	_ http.Flusher                              = (*recorder)(nil)
	_ interface{ FlushError() error }           = (*recorder)(nil)
	_ interface{ Unwrap() http.ResponseWriter } = (*recorder)(nil)
)

func (rw *recorder) Header() http.Header { return rw.w.Header() }

func (rw *recorder) WriteHeader(code int) {
	switch {
	case rw.status != 0:
		// Superfluous: let net/http say so.
	case code >= 100 && code < 200 && code != http.StatusSwitchingProtocols:
		// Informational (103 Early Hints): sent, not the final status,
		// not recorded.
	default:
		rw.status = code
		h := rw.w.Header()
		rw.header = rw.cfg.snapshot(h)
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
		if rw.holding() {
			return
		}
	}
	rw.w.WriteHeader(code)
}

// Write captures p, then sends it. p is captured whether or not the client
// is still there to receive it: the side effect happened, and the retry of a
// client whose connection dropped is exactly who needs the record. Once a
// write to the client failed (it hung up), later writes are captured and
// not sent, and the handler is not told: it runs to completion and its
// whole response is recorded. With Options.CancelWithClient the handler is
// told, and the engine releases the key instead.
func (rw *recorder) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	rw.written += int64(len(p))
	if rw.holding() {
		if !rw.held.failed && len(rw.body)+len(p) <= rw.cfg.maxRecord {
			rw.body = append(rw.body, p...)
			return len(p), nil
		}
		if rw.spill(); rw.held.failed {
			return len(p), nil
		}
	}
	if !rw.overflow {
		if len(rw.body)+len(p) > rw.cfg.maxRecord {
			rw.overflow, rw.body = true, nil
		} else {
			rw.body = append(rw.body, p...)
		}
	}
	if rw.gone == nil {
		n, err := rw.w.Write(p)
		if err == nil {
			return n, nil
		}
		rw.gone = err
	}
	if rw.cfg.engine.CancelWithClient {
		return 0, rw.gone
	}
	return len(p), nil
}

// FlushError sends what was written so far, and is what
// [http.ResponseController.Flush] calls. Once the client is gone it does
// nothing, and reports no error unless Options.CancelWithClient.
func (rw *recorder) FlushError() error {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	if rw.holding() {
		return nil // sent with the rest, after the commit
	}
	if rw.gone == nil {
		if err := http.NewResponseController(rw.w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			rw.gone = err
		} else {
			return err
		}
	}
	if rw.cfg.engine.CancelWithClient {
		return rw.gone
	}
	return nil
}

// spill ends the hold of a response that outgrew the record limit: the
// claim's transaction commits with an unreplayable result (the side effect
// happened; the answer cannot be replayed), then what was held goes to the
// client and the rest passes through. If the commit fails, nothing reaches
// the client: the middleware answers 503 once the handler returns.
func (rw *recorder) spill() {
	if err := rw.held.spill(idem.Result{Status: rw.status, Unreplayable: true}); err != nil {
		rw.held.failed = true
		return
	}
	rw.held.sent = true
	body := rw.body
	rw.overflow, rw.body = true, nil
	rw.w.WriteHeader(rw.status)
	if _, err := rw.w.Write(body); err != nil {
		rw.gone = err
	}
}

// Flush implements [http.Flusher].
func (rw *recorder) Flush() { _ = rw.FlushError() }

// Unwrap returns the underlying writer, for [http.ResponseController]
// (deadlines, full duplex, hijacking). A hijacked connection bypasses the
// capture: what is written to it is neither seen nor recorded.
func (rw *recorder) Unwrap() http.ResponseWriter { return rw.w }

// declared reports whether the response declared its length.
func (rw *recorder) declared() bool { return rw.status != 0 && rw.length >= 0 }

// whole reports whether the handler wrote the length it declared, if it
// declared one: a shorter (or longer) body is a broken response.
func (rw *recorder) whole() bool { return !rw.declared() || rw.written == rw.length }

// result returns what was captured, as the store records it. A handler that
// wrote nothing answered 200 with an empty body, which net/http sends when it
// returns.
func (rw *recorder) result() idem.Result {
	if rw.status == 0 {
		rw.status, rw.length = http.StatusOK, -1
		rw.header = rw.cfg.snapshot(rw.w.Header())
	}
	if rw.overflow {
		return idem.Result{Status: rw.status, Unreplayable: true}
	}
	return idem.Result{Status: rw.status, Header: rw.header, Body: rw.body}
}
