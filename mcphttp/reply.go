package mcphttp

import (
	"bytes"
	"errors"
	"mime"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/adapter"
)

// ReplayedMetaKey is the _meta member, true, of a result the wrapper
// replays rather than runs: the recorded response's result with this member
// added to its _meta. MCP clients hand an application the result's members,
// not the HTTP response's headers (where Idempotent-Replayed says the
// same), so this is how an agent framework tells a replay from a fresh run.
// The name carries the vendor prefix the MCP _meta rules ask for
// (io.github.idemkit, reverse DNS of the project's GitHub namespace); a
// first run's result never has it.
const ReplayedMetaKey = "io.github.idemkit/replayed"

// replayBody is the JSON-RPC response the wrapper answers a call with when
// it does not run it. replayed reports that it is the recorded response
// (a readable [engine.Replay]); the wrapper's own errors are not replays
// and never say they are.
func (m *wrapper) replayBody(c call, req idem.ClaimRequest, d engine.Decision) (body []byte, replayed bool) {
	switch d.Outcome {
	case engine.Mismatch:
		return wrapperError(c.rawID, rpcError{
			Code:    CodeKeyReused,
			Message: "_meta.idempotencyKey was already used for a different call (another tool or other arguments)",
			Data:    errorData{Reason: ReasonKeyReused, Type: TypeConflict},
		})
	case engine.InvalidKey:
		return wrapperError(c.rawID, rpcError{
			Code: CodeInvalidParams, Message: "the idempotency store rejected the call's key: " + adapter.KeyReason(d.Err).Error(),
			Data: errorData{Reason: ReasonInvalidKey},
		})
	case engine.Unavailable:
		msg := "idempotency store unavailable; the call was not run, retry it"
		if errors.Is(d.Err, idem.ErrCapacity) {
			msg = "idempotency store full; the call was not run, retry it later"
		}
		return wrapperError(c.rawID, rpcError{
			Code: CodeUnavailable, Message: msg,
			Data: errorData{Reason: ReasonUnavailable, RetryAfterMs: d.RetryAfter.Milliseconds()},
		})
	case engine.Replay:
		if d.Claim.Result.Unreplayable {
			return wrapperError(c.rawID, rpcError{
				Code:    CodeUnreplayable,
				Message: "this call already ran, but its response was too large to record and cannot be replayed",
				Data:    errorData{Reason: ReasonUnreplayable},
			})
		}
		body, err := withID(d.Claim.Result.Body, c.rawID)
		if err == nil {
			return body, true
		}
		m.log.Error("mcphttp: recorded response unreadable", "key_digest", idem.KeyDigest(req.Scope, req.Key), "err", err)
		return wrapperError(c.rawID, rpcError{
			Code:    CodeUnreplayable,
			Message: "this call already ran, but its recorded response cannot be replayed",
			Data:    errorData{Reason: ReasonUnreplayable},
		})
	default: // still in flight after the wait
		return wrapperError(c.rawID, rpcError{
			Code:    CodeInFlight,
			Message: "the same call is still running; retry it with the same id or _meta.idempotencyKey to get its result",
			Data:    errorData{Reason: ReasonInFlight, Type: TypeInProgress, RetryAfterMs: d.RetryAfter.Milliseconds()},
		})
	}
}

// answerCancelled answers a call that was cancelled before it ran: its
// request context ended while it claimed or waited, or its work's context
// ended before the call began. Its client left, and the answer goes
// nowhere; or the server ended the context (a shutdown cancelling what
// still runs, a lease or deadline run out), and the client, still
// connected, must be told to retry rather than read an empty 200. probe is
// the call's probe, if it was probed; without one, the answer probes
// first, unless the request's context ended, when it is too late to probe
// and the answer is a JSON body, which every client accepts.
func (m *wrapper) answerCancelled(w http.ResponseWriter, r *http.Request, c call, probe *responseBuffer) {
	body := errorResponse(c.rawID, rpcError{
		Code:    CodeUnavailable,
		Message: "the call was cancelled before it ran (the server may be shutting down); retry it with the same id or _meta.idempotencyKey",
		Data:    errorData{Reason: ReasonUnavailable, RetryAfterMs: m.eng.RetryAfter().Milliseconds()},
	})
	switch {
	case probe != nil:
		m.answer(w, r, c, body, false, probe)
	case r.Context().Err() == nil:
		m.answer(w, r, c, body, false)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}
}

// answer writes a JSON-RPC response the wrapper made itself, framed as the
// inner handler frames its answers (an SSE event or a JSON body, with its
// status and headers). Without a probe yet, it probes first. It returns
// the HTTP status, and whether the body was the answer: false when the
// inner handler refused the request, and its refusal was.
func (m *wrapper) answer(w http.ResponseWriter, r *http.Request, c call, body []byte, replay bool, probes ...*responseBuffer) (status int, answered bool) {
	var probe *responseBuffer
	if len(probes) > 0 {
		probe = probes[0]
	} else {
		var accepted bool
		if probe, accepted = m.probe(r, c); !accepted {
			probe.writeTo(w)
			return probe.status, false
		}
	}
	h := w.Header()
	for k, vs := range probe.header {
		if k == "Content-Length" {
			continue
		}
		h[k] = append([]string(nil), vs...)
	}
	if replay {
		h.Set(adapter.ReplayedHeader, "true")
	}
	if isSSE(probe.header.Get("Content-Type")) {
		w.WriteHeader(probe.status)
		var b bytes.Buffer
		b.WriteString("event: message\ndata: ")
		b.Write(body)
		b.WriteString("\n\n")
		_, _ = w.Write(b.Bytes())
		return probe.status, true
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(probe.status)
	_, _ = w.Write(body)
	return probe.status, true
}

func isSSE(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream"
}
