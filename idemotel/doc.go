// Package idemotel reports idem's events to OpenTelemetry: spans on the
// request's trace and metrics with semantic-convention style names (a module
// of its own).
//
// # Mounting
//
// Give the adapters the same observer, behind instrumentation that puts a
// server span in the request context (otelhttp or any other), which idem
// annotates rather than starting traces of its own:
//
//	obs, err := idemotel.New(idemotel.Options{TracerProvider: tp, MeterProvider: mp, Store: "postgres"})
//	if err != nil { return err }
//	protect := middleware.New(store, middleware.Options{Observer: obs.Observe})
//	tools := mcphttp.New(store, mcphttp.Options{Observer: obs.Observe})
//	srv.Handler = otelhttp.NewHandler(mux, "api") // mux serves protect(...) and tools(...)
//
// A sweeper reports what it removed with [Observer.Swept], an [idem.Sweeper]
// OnSweep as it is: idem.Sweeper{Store: store, OnSweep: obs.Swept}.
//
// # Spans
//
// Everything goes on the span in the request's context
// ([trace.SpanFromContext]), nothing when it is not recording: each claim a
// child span backdated to its start, the rest events. All carry idem.adapter
// and idem.store; all but idem.rejected, idem.key.digest:
//
//	idem.claim       span: idem.outcome, idem.wait.duration (s) when it waited; a failed
//	                 claim ("unavailable") has error.type, and status Error unless the
//	                 client left
//	idem.wait        child of idem.claim covering the wait
//	idem.complete    result recorded: idem.result.status_code, idem.execution.duration (s)
//	idem.release     released (a retry runs again): idem.execution.duration
//	idem.left        left, unrenewed, to its lease (mcphttp: stream ended without the
//	                 response): idem.execution.duration
//	idem.lease_lost  lost while running (EventLeaseLost) or when finishing (EventStale):
//	                 taken over, forgotten, or lease running out
//	idem.rejected    the handler's own checks refused what would have been a replay
//	                 (mcphttp's probe): idem.result.status_code
//	idem.store_error a store call after the claim failed: idem.store.operation,
//	                 error.type
//
// # Metrics
//
// Under the meter "github.com/idemkit/idem/idemotel"; idem.store on every
// point, idem.adapter on every point of a request (each omitted when
// unknown):
//
//	idem.requests            Counter {request}, by idem.outcome
//	idem.claim.duration      Histogram s, waits included, by idem.outcome
//	idem.wait.duration       Histogram s, requests that waited, by idem.outcome
//	idem.execution.duration  Histogram s, by idem.execution.outcome (completed, released, left)
//	idem.active_claims       UpDownCounter {claim}: claimed, end not reported
//	idem.takeovers           Counter {claim}
//	idem.leases.lost         Counter {claim}
//	idem.rejections          Counter {request} (EventRejected)
//	idem.refusals            Counter {request} (EventRefused), by idem.reason
//	                         (missing_key, invalid_key, body_too_large, ...)
//	idem.unprotected         Counter {request} (EventUnprotected), by idem.reason
//	                         (no_key, fail_open)
//	idem.keys.rotated        Counter {request} (EventKeyRotated, mcphttp's NewKeyGuard)
//	idem.store.errors        Counter {error}, by idem.store.operation (claim, renew,
//	                         complete, release)
//	idem.sweeps              Counter {sweep} ([Observer.Swept])
//	idem.sweep.entries       Counter {entry}, by idem.sweep.kind (abandoned, expired)
//	idem.replay_cache.hits   Counter {hit} (Options.ReplayCacheHits)
//
// idem.outcome is acquired, takeover, replayed, in_flight, mismatch or
// unavailable. A store call that failed because the client left is traced
// but not counted: alerting on it would page for impatient clients.
//
// # What never appears
//
// Keys and scopes are client data: spans carry [idem.KeyDigest] (the logs'
// digest), metrics neither, so cardinality stays bounded. Of an error, only
// error.type is recorded, never its message.
package idemotel
