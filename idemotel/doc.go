// Package idemotel reports idem's events to OpenTelemetry: spans on the
// request's trace and metrics with semantic-convention style names. It is a
// package of its own so that services which do not use OpenTelemetry do not
// import it.
//
// # Mounting
//
// Give the adapters the same observer; wrap the service with an
// instrumentation that puts a server span in the request context (otelhttp,
// or any other), since idem annotates that span rather than starting traces
// of its own:
//
//	obs, err := idemotel.New(idemotel.Options{TracerProvider: tp, MeterProvider: mp, Store: "postgres"})
//	if err != nil { return err }
//	protect := middleware.New(store, middleware.Options{Observer: obs.Observe})
//	tools := mcphttp.New(store, mcphttp.Options{Observer: obs.Observe})
//	srv.Handler = otelhttp.NewHandler(mux, "api") // mux serves protect(...) and tools(...)
//
// A sweeper reports what it removed with [Observer.Swept], which fits
// [idem.Sweeper]'s OnSweep as it is: idem.Sweeper{Store: store, OnSweep: obs.Swept}.
//
// # Spans
//
// All of it goes on the span found in the request's context (see
// [trace.SpanFromContext]); when that span is not recording, no tracing work
// is done. Each claim becomes a child span, backdated to when the claim
// began; the rest are span events on the request's span:
//
//	idem.claim       child span, for claimed, replayed, in-flight, mismatched
//	                 and failed claims; attributes idem.outcome, idem.adapter,
//	                 idem.store, idem.key.digest, and idem.wait.duration (s)
//	                 when the claim waited for an in-flight duplicate. A failed
//	                 claim (outcome "unavailable") has error.type, and status
//	                 Error unless the client left (context cancelled).
//	idem.wait        child span of idem.claim covering the wait, at its end.
//	idem.complete    event: the result was recorded; idem.result.status_code,
//	                 idem.execution.duration (s).
//	idem.release     event: the claim was released so a retry runs again;
//	                 idem.execution.duration (s).
//	idem.left        event: the claim was left, unrenewed, to its lease
//	                 (mcphttp: the call's stream ended without its
//	                 response); idem.execution.duration (s).
//	idem.lease_lost  event: the claim was lost (taken over, forgotten, or its
//	                 lease about to run out unrenewed), found while the work
//	                 ran (EventLeaseLost) or when finishing it (EventStale);
//	                 its result is not recorded.
//	idem.rejected    event: the protected handler's own checks refused a
//	                 request the adapter would have replayed (mcphttp's
//	                 pre-replay probe); idem.result.status_code. It names no
//	                 key: the refusal came before one was looked up.
//	idem.store_error event: a store call after the claim failed;
//	                 idem.store.operation, error.type.
//
// Every event carries idem.adapter and idem.store; all but idem.rejected
// carry idem.key.digest.
//
// # Metrics
//
// All under the meter "github.com/idemkit/idem/idemotel". idem.store is on
// every point and idem.adapter on every point of a request (each omitted
// when unknown: an event whose Adapter is empty has no idem.adapter):
//
//	idem.requests            Counter {request}: requests by idem.outcome.
//	idem.claim.duration      Histogram s: time to claim, waits included,
//	                         by idem.outcome.
//	idem.wait.duration       Histogram s: time spent waiting for an in-flight
//	                         duplicate, by idem.outcome (only requests that
//	                         waited).
//	idem.execution.duration  Histogram s: how long the protected work ran under
//	                         its claim, by idem.execution.outcome
//	                         (completed, released, left).
//	idem.active_claims       UpDownCounter {claim}: claims taken by this
//	                         process whose end has not been reported yet.
//	idem.takeovers           Counter {claim}: claims taken over from an owner
//	                         whose lease ran out.
//	idem.leases.lost         Counter {claim}: claims lost while running.
//	idem.rejections          Counter {request}: requests the protected
//	                         handler refused before a replay (EventRejected).
//	idem.refusals            Counter {request}: requests the adapter answered
//	                         itself, not deduplicable as sent (EventRefused),
//	                         by idem.reason (missing_key, invalid_key,
//	                         body_too_large, ...).
//	idem.unprotected         Counter {request}: requests run without
//	                         deduplication (EventUnprotected), by idem.reason
//	                         (no_key, fail_open).
//	idem.keys.rotated        Counter {request}: calls made again by the same
//	                         caller under a new key (EventKeyRotated, from
//	                         mcphttp's NewKeyGuard).
//	idem.store.errors        Counter {error}: failed store calls, by
//	                         idem.store.operation (claim, renew, complete,
//	                         release).
//	idem.sweeps              Counter {sweep}: sweeper passes ([Observer.Swept]).
//	idem.sweep.entries       Counter {entry}: entries swept, by
//	                         idem.sweep.kind (abandoned, expired).
//	idem.replay_cache.hits   Counter {hit}: claims answered from the store's
//	                         replay cache (Options.ReplayCacheHits).
//
// The outcomes (idem.outcome) are acquired, takeover, replayed, in_flight,
// mismatch and unavailable (the claim itself failed in the store).
// A store call that failed because the request's context was cancelled (the
// client left) is traced but not counted: it is not the store's fault, and
// alerting on it would page for impatient clients.
//
// # What never appears
//
// Keys and scopes are client data (request ids, session ids, hashed
// credentials). They never appear in an attribute: spans carry
// [idem.KeyDigest], the digest the logs use, and metrics carry neither, so
// their cardinality stays bounded. Error messages are not recorded either,
// only error.type.
package idemotel
