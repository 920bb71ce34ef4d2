package mcphttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/adapter"
)

// recorder is the http.ResponseWriter the inner handler writes the call's
// response to: the adapters' capture core ([adapter.CaptureWriter]: the
// status, Flusher, the rules for a client that vanished mid-write) with a
// [scanner] as its Sink. Every byte goes straight on to the client, as it is
// written and flushed; the scanner looks at a copy to find the response to
// record. A write to a client that went away is still scanned, and the
// inner handler is not told: the call runs to completion and its response
// is recorded for the retry that client will send.
type recorder struct {
	adapter.CaptureWriter
	id    idem.RequestID
	limit int
	scan  *scanner // nil until the status is sent
	// work is the engine's context of the call's work; nil means one
	// never cut off.
	work context.Context
	// inner is the inner request's context, which ends before the
	// recorder is done only when the wrapper ends it (errInnerCutOff) or,
	// with Options.Engine.CancelWithClient, when the client goes away; nil means
	// it never does.
	inner context.Context
}

func newRecorder(w http.ResponseWriter, id idem.RequestID, limit int, work, inner context.Context) *recorder {
	r := &recorder{id: id, limit: limit, work: work, inner: inner}
	r.CaptureWriter = adapter.CaptureWriter{W: w, Sink: r}
	return r
}

var (
	_ http.Flusher = (*recorder)(nil)
	_ interface {
		Unwrap() http.ResponseWriter
	} = (*recorder)(nil)
)

// Begin starts the scanner, in the framing the response's Content-Type
// says.
func (r *recorder) Begin(_ int, h http.Header) bool {
	r.scan = newScanner(r.id, r.limit, h.Get("Content-Type"))
	return true
}

// Capture scans p.
func (r *recorder) Capture(p []byte) bool {
	r.scan.write(p)
	return true
}

// Holding is false: a held response (Options.InTransactionTools) is held by
// the writer the recorder writes to.
func (r *recorder) Holding() bool { return false }

// verdict is how the call ended, as far as its answer shows, for the
// engine.
func (r *recorder) verdict() engine.Verdict {
	if r.inner != nil && r.inner.Err() != nil && !errors.Is(context.Cause(r.inner), errInnerCutOff) &&
		(r.scan == nil || r.scan.final == nil && !r.scan.oversize) {
		// Options.Engine.CancelWithClient, and the client went away: the
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
		return engine.Verdict{Action: engine.LeaveToLease, Why: "the inner handler answered nothing: the call may have run"}
	}
	r.scan.finish()
	switch s := r.scan; {
	case s.final != nil && !s.finalError && r.work != nil && r.work.Err() != nil && isToolError(s.final):
		// The call was cut off (Options.Engine.CancelWithClient) and its tool
		// answered with an error: go-sdk makes a tool's returned error,
		// such as its context's, a result with isError. That is an
		// artefact of the cancellation, not the call's result: the retry
		// runs the tool again.
		return engine.Verdict{Action: engine.Release, Why: "the call was cut off and its tool answered with an error"}
	case s.final != nil && !s.finalError:
		return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: r.Status, Body: s.final}}
	case s.final == nil && s.oversize && r.Status == http.StatusOK:
		// The response was seen, and was too large to record: the tool
		// ran, and must not run again.
		return engine.Verdict{Action: engine.Complete, Result: idem.Result{Status: r.Status, Unreplayable: true}}
	case s.final == nil && r.Status == http.StatusOK && s.sse:
		// The call's SSE stream ended without its response: the session
		// closed, or the server closed the stream for the client to
		// resume it elsewhere (SEP-1699, see the package doc). The tool may still be running,
		// so the claim is kept, unrenewed, until its lease runs out:
		// until then a retry waits or is told to retry, and never runs
		// the tool alongside. Releasing would invite exactly that.
		return engine.Verdict{Action: engine.LeaveToLease, Why: "the call's stream ended without its response"}
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
	sse := r.scan != nil && r.scan.sse || r.scan == nil && isSSE(r.W.Header().Get("Content-Type"))
	switch {
	case sse:
		var b bytes.Buffer
		b.WriteString("event: message\ndata: ")
		b.Write(body)
		b.WriteString("\n\n")
		_, _ = r.Write(b.Bytes())
		r.Flush()
	case r.scan == nil:
		r.W.Header().Set("Content-Type", "application/json")
		r.W.Header().Del("Content-Length")
		_, _ = r.Write(body)
	}
}
