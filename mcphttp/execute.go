package mcphttp

import (
	"context"
	"net/http"

	"github.com/idemkit/idem/engine"
)

// execute runs the call through the inner handler under the claim d
// acquired, streaming its answer to the client while recording the call's
// response; the engine completes, releases or leaves the claim as the
// recorder reads the answer.
func (m *wrapper) execute(w http.ResponseWriter, r *http.Request, c call, req *engine.Request, d engine.Decision, forward string) {
	x := m.eng.Start(r.Context(), req, d)
	// The inner handler runs on the engine's context, which outlives the
	// client (unless Options.CancelWithClient): a client that drops its
	// connection after sending the call is exactly the one that will retry
	// it, and its retry must find the response recorded, not a second
	// execution.
	ctx := NewContext(x.Context(), Meta{
		SessionID: c.sessionID, IdempotencyKey: forward,
		Authorization: r.Header.Get("Authorization"), APIKey: r.Header.Get(APIKeyHeader),
	})
	ir := r.Clone(ctx)
	// The tool forwards this key, never the client's own: see forwardedKey.
	ir.Header.Set(DerivedKeyHeader, forward)
	rec := &recorder{w: w, id: c.id, limit: m.maxRecord, work: x.Context()}
	held := m.holdBack(rec, x, r, ir, c) // nil unless the call runs in a transaction (transaction.go)
	defer held.forget()
	var final engine.Verdict
	x.Do(func(context.Context) engine.Verdict {
		stop := m.cancelOnEngineStop(x.Context(), r, c)
		defer stop()
		end := m.sessions.start(r.Header.Get("Mcp-Session-Id"))
		defer end()
		m.next.ServeHTTP(rec, ir)
		final = rec.verdict()
		return final
	}, rec.verdict)
	held.send(final)
}
