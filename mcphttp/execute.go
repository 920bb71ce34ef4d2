package mcphttp

import (
	"context"
	"net/http"

	"github.com/idemkit/idem/engine"
)

// execute runs the call through the inner handler under the claim d
// acquired, streaming its answer to the client while recording the call's
// response; the engine completes, releases or leaves the claim as the
// recorder reads the answer. probe is the call's probe, if it was probed
// before it claimed; nil otherwise.
func (m *wrapper) execute(w http.ResponseWriter, r *http.Request, c call, req *engine.Request, d engine.Decision, forward string, probe *responseBuffer) {
	x := m.eng.Start(r.Context(), req, d)
	if err := x.Err(); err != nil {
		// The work's context ended before the call began (the claim's
		// answer came after its lease ran out, the deadline passed, the
		// client left with CancelWithClient): the key may be another
		// call's already, and a tool that does not check its context
		// would run its effect anyway.
		x.Finish(engine.Verdict{Action: engine.Release, Why: "the work's context ended before the call was given to the inner handler: " + err.Error()})
		m.answerCancelled(w, r, c, probe)
		return
	}
	// The inner request outlives the client (unless
	// Options.Engine.CancelWithClient): a client that drops its connection after
	// sending the call is exactly the one that will retry it, and its
	// retry must find the response recorded, not a second execution. It
	// outlives the engine's cut-off of the work too (lease lost, deadline,
	// shutdown): go-sdk drops the answer of a request whose context ended,
	// and a tool that finished its effect must have its answer recorded.
	// The tool is cut off its own way instead (see onCutOff), and the
	// request only a lease later.
	base := context.WithoutCancel(r.Context())
	if m.cancelWithClient {
		base = r.Context()
	}
	tool := &toolCut{work: x.Context(), forward: forward}
	defer tool.finished.Store(true)
	ctx := context.WithValue(NewContext(base, Meta{
		SessionID: c.sessionID, IdempotencyKey: forward,
		Authorization: r.Header.Get("Authorization"), APIKey: r.Header.Get(APIKeyHeader),
	}), toolCutKey{}, tool)
	ctx, endInner := context.WithCancelCause(ctx)
	defer endInner(nil)
	ir := r.Clone(ctx)
	// The tool forwards this key, never the client's own: see forwardedKey.
	ir.Header.Set(DerivedKeyHeader, forward)
	rec := newRecorder(w, c.id, m.maxRecord, x.Context(), ctx)
	held := m.holdBack(rec, x, r, ir, c) // nil unless the call runs in a transaction (transaction.go)
	defer held.forget()
	var final engine.Verdict
	x.Do(func(context.Context) engine.Verdict {
		stop := m.onCutOff(x.Context(), r, c, tool, endInner)
		defer stop()
		end := m.sessions.start(r.Header.Get("Mcp-Session-Id"))
		defer end()
		m.next.ServeHTTP(rec, ir)
		final = rec.verdict()
		if final.Action == engine.LeaveToLease && x.Err() != nil {
			// Cut off, and no answer came: the client must not take the
			// silence for one.
			rec.cutOff(c.rawID, x.Err(), m.eng.RetryAfter())
		}
		final = held.verdict(final)
		return final
	}, func() engine.Verdict { return held.verdict(rec.verdict()) })
	held.send(final)
}
