package mcphttp

import (
	"context"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ToolCancellation is go-sdk server middleware through which the wrapper
// cancels a deduplicated call's tool when it cuts the call off (its lease
// was lost, its deadline passed, Options.Engine.Shutdown) without ending the
// call's HTTP request, on which go-sdk writes the tool's answer. Add it to
// a stateless server behind the wrapper:
//
//	server.AddReceivingMiddleware(mcphttp.ToolCancellation)
//
// A stateless go-sdk server (and every call at [SessionlessProtocol]) ties a
// tool's context to its HTTP request's alone, and drops the answer of a
// request whose context ended: cancelling the one loses the other. With
// this middleware the tool's context ends at the cut-off, and an answer it
// still gives (its effect done) reaches the wrapper and is recorded. Without
// it, the wrapper leaves the tool running for up to Options.Engine.Lease after
// the cut-off, then ends the request (see "Cut off" in the package
// documentation). On a stateful server it does nothing: there the wrapper
// cancels the tool with notifications/cancelled. It passes every other
// request, and every call the wrapper does not run, straight to next.
func ToolCancellation(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		tc, _ := ctx.Value(toolCutKey{}).(*toolCut)
		if tc == nil || !tc.take(req) {
			return next(ctx, method, req)
		}
		ctx, stop := tc.workContext(ctx)
		defer stop()
		return next(ctx, method, req)
	}
}

var _ mcp.Middleware = ToolCancellation

// WorkContext returns a context with ctx's values that ends when ctx does
// and when the wrapper cuts off the deduplicated call ctx belongs to (its
// lease was lost, its deadline passed, Options.Engine.Shutdown), with the
// cut-off's cause ([idem.ErrLeaseLost], [engine.ErrExecutionTimeout],
// [engine.ErrShutdown]); stop releases it. ctx is the context of the
// request the wrapper hands the inner handler, or one derived from it: an
// MCP server other than go-sdk runs the call's tool on WorkContext(ctx) to
// be told of a cut-off while the request, which the wrapper keeps a lease
// longer, carries the tool's answer. (go-sdk's server uses
// [ToolCancellation].) For any other ctx it returns ctx.
func WorkContext(ctx context.Context) (_ context.Context, stop context.CancelFunc) {
	tc, _ := ctx.Value(toolCutKey{}).(*toolCut)
	if tc == nil || tc.finished.Load() {
		return ctx, func() {}
	}
	return tc.workContext(ctx)
}

// workContext is ctx, ended at the call's cut-off too.
func (tc *toolCut) workContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stopWatch := context.AfterFunc(tc.work, func() { cancel(context.Cause(tc.work)) })
	return ctx, func() {
		stopWatch()
		cancel(nil)
	}
}

// toolCutKey is the context key of a call's *toolCut, in the context of
// the inner request the wrapper runs it on. A stateless go-sdk server runs
// the call's handlers on a context derived from that request's, so
// [ToolCancellation] finds it there.
type toolCutKey struct{}

// toolCut is what [ToolCancellation] needs of a call the wrapper runs: the
// engine's context of its work, which ends at a cut-off, and whether a
// tool took it.
type toolCut struct {
	work context.Context
	// forward is the key the wrapper handed the inner handler in
	// DerivedKeyHeader: the call's, for take to check.
	forward string
	taken   atomic.Bool
	// finished is set once the wrapper is done with the call.
	finished atomic.Bool
}

// take reports whether req is the call's and no other request took it. A
// stateful go-sdk session runs its handlers on the context of the request
// that created the session, whose values may include another call's
// toolCut: the derived key, and the first request only, keep a call from
// taking one that is not its own.
func (tc *toolCut) take(req mcp.Request) bool {
	extra := req.GetExtra()
	if tc.finished.Load() || extra == nil || extra.Header.Get(DerivedKeyHeader) != tc.forward {
		return false
	}
	return tc.taken.CompareAndSwap(false, true)
}
