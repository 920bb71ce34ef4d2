package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
)

// Report reports d as an [idem.Event] and logs it. [Engine.Claim] reports
// its decision itself; an adapter calls Report after [Engine.TryClaim] when
// it answers without claiming again.
func (e *Engine) Report(ctx context.Context, req *Request, d Decision) {
	ev := idem.Event{Duration: time.Since(req.start), Waited: req.waited}
	switch d.Outcome {
	case Run:
		ev.Kind, ev.Takeover = idem.EventClaimed, d.Claim.Takeover
		if d.Claim.Takeover {
			e.log(ctx, slog.LevelInfo, "took over an abandoned idempotency claim", req, slog.Int64("generation", d.Claim.Token.Generation))
		} else {
			e.log(ctx, slog.LevelDebug, "claimed idempotency key", req, slog.Int64("generation", d.Claim.Token.Generation))
		}
	case Replay:
		ev.Kind, ev.Status = idem.EventReplayed, d.Claim.Result.Status
		e.log(ctx, slog.LevelDebug, "replaying recorded result", req)
	case InFlight:
		ev.Kind = idem.EventInFlight
		e.log(ctx, slog.LevelInfo, "idempotency key in flight", req)
	case Mismatch:
		ev.Kind = idem.EventMismatch
		e.log(ctx, slog.LevelInfo, "idempotency key reused for a different request", req)
	case Unavailable:
		ev.Kind, ev.Op, ev.Err = idem.EventStoreError, "claim", d.Err
		e.log(ctx, slog.LevelWarn, "idempotency store failed; the request was not run", req, slog.Any("err", d.Err))
	case InvalidKey:
		ev.Kind, ev.Reason = idem.EventRefused, idem.RefusedInvalidKey
		e.log(ctx, slog.LevelInfo, "the store rejected the idempotency key", req, slog.Any("err", d.Err))
	default: // RequestEnded: the client left, or the server ended the request
		return
	}
	e.observe(req, ev)
}

func (e *Engine) observe(req *Request, ev idem.Event) {
	if ev.Kind == idem.EventCompleted {
		e.recordRun(ev.Duration)
	}
	if req.Observe == nil {
		return
	}
	ev.Adapter, ev.Scope, ev.Key = e.adapter, req.Claim.Scope, req.Claim.Key
	req.Observe(ev)
}

// log logs msg with the key as a digest; the key itself only at debug level.
// attrs are copied, not handed to the logger, so that they do not escape:
// a call whose level is not enabled (a claim's debug line, on every
// request) allocates nothing.
func (e *Engine) log(ctx context.Context, level slog.Level, msg string, req *Request, attrs ...slog.Attr) {
	l := e.logger
	if !l.Enabled(ctx, level) {
		return
	}
	all := make([]slog.Attr, 0, len(attrs)+3)
	all = append(all, attrs...)
	all = append(all, slog.String("key_digest", idem.KeyDigest(req.Claim.Scope, req.Claim.Key)))
	if e.adapter != "" {
		all = append(all, slog.String("adapter", e.adapter))
	}
	if l.Enabled(ctx, slog.LevelDebug) {
		all = append(all, slog.String("key", req.Claim.Key.String()))
	}
	l.LogAttrs(ctx, level, msg, all...)
}
