// Package idemprom exports idem's events as Prometheus metrics, with
// github.com/prometheus/client_golang: the collectors, and an observer for
// the adapters and the sweeper that updates them. It is a package of its
// own, so that services which do not use Prometheus do not import
// client_golang; OpenTelemetry users take idemotel instead. The demo's
// /metrics is served with it.
//
// # Mounting
//
// Give both adapters and the sweeper the same Metrics, and serve the
// registry as usual:
//
//	reg := prometheus.NewRegistry()
//	m, err := idemprom.New(idemprom.Options{Registerer: reg})
//	if err != nil { return err }
//	protect := middleware.New(store, middleware.Options{Observer: m.Observe})
//	tools := mcphttp.New(store, mcphttp.Options{Observer: m.Observe})
//	sweeper := idem.Sweeper{Store: store, OnSweep: m.Swept}
//	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// # Metrics
//
// The names and labels are a contract: docs/operations.md's alerts and the
// demo's /metrics use them. Every counter but swept_total has the label
// adapter ("http" for the middleware, "mcp" for mcphttp); keys and scopes
// never become labels (they are client data, unbounded).
//
//	idem_claimed_total{adapter}              requests that claimed their key and ran the handler
//	idem_replayed_total{adapter}             requests answered with a recorded result
//	idem_in_flight_total{adapter}            duplicates whose original still ran after the wait
//	idem_mismatched_total{adapter}           keys reused for a different request
//	idem_completed_total{adapter}            results recorded
//	idem_released_total{adapter}             claims released so that a retry runs again
//	idem_stale_total{adapter}                claims lost while the handler ran
//	idem_rejected_total{adapter}             duplicates the protected handler's own checks refused
//	idem_refused_total{adapter,reason}       requests idem answered itself, not deduplicable as sent:
//	                                         missing_key, invalid_key, body_too_large, body_unreadable,
//	                                         unscoped_cookies, invalid_request (idem.Refused*)
//	idem_unprotected_total{adapter,reason}   requests run without deduplication: no_key, fail_open
//	idem_store_errors_total{adapter,op}      store calls that failed, by operation
//	idem_swept_total{kind}                   removed by the sweeper: abandoned or expired
//	idem_claim_duration_seconds{adapter,outcome}    histogram: claimed, replayed, in_flight
//	idem_handler_duration_seconds{adapter,outcome}  histogram: completed, released, left (to its lease)
//
// Every answer idem gives instead of the handler is counted: a replay, an
// in-flight or mismatch answer, a store error, a refusal by reason. The
// counters of both adapters (and the sweeper's) are exported at zero
// from the start, each refusal and unprotected reason an adapter can
// report included, so that dashboards and alerts see them before the
// first event.
package idemprom

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
)

// The names the idem adapters report in Event.Adapter (middleware.AdapterName
// and mcphttp.AdapterName), whose series are created at zero. Written out
// rather than imported: mcphttp is a module of its own (the MCP SDK), and
// this package imports no adapter.
const (
	adapterHTTP = "http"
	adapterMCP  = "mcp"
)

// The reasons each adapter can report on an idem.EventRefused and an
// idem.EventUnprotected, whose series are created at zero.
var (
	refusals = map[string][]string{
		adapterHTTP: {idem.RefusedMissingKey, idem.RefusedInvalidKey, idem.RefusedBodyTooLarge, idem.RefusedBodyUnreadable, idem.RefusedUnscopedCookies},
		adapterMCP:  {idem.RefusedInvalidKey, idem.RefusedUnscopedCookies, idem.RefusedInvalidRequest},
	}
	unprotected = map[string][]string{
		adapterHTTP: {idem.UnprotectedNoKey, idem.UnprotectedFailOpen},
		adapterMCP:  {idem.UnprotectedNoKey},
	}
)

// Options configures [New]. The zero value registers on
// prometheus.DefaultRegisterer.
type Options struct {
	// Registerer receives the collectors. Nil means
	// prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	// ClaimBuckets are the buckets of idem_claim_duration_seconds, in
	// seconds. Nil means [DefaultClaimBuckets].
	ClaimBuckets []float64
	// HandlerBuckets are the buckets of idem_handler_duration_seconds.
	// Nil means prometheus.DefBuckets.
	HandlerBuckets []float64
}

// DefaultClaimBuckets span a claim answered from memory (half a
// millisecond) to one that waited for an in-flight original (seconds).
var DefaultClaimBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Metrics updates the collectors from idem's events. It is safe for
// concurrent use.
type Metrics struct {
	claimed, replayed, inFlight, mismatched, completed, released, stale, rejected *prometheus.CounterVec
	refused, unprotected                                                          *prometheus.CounterVec

	storeErrors *prometheus.CounterVec
	swept       *prometheus.CounterVec
	claimTime   *prometheus.HistogramVec
	handlerTime *prometheus.HistogramVec
}

// New creates the collectors and registers them. It fails if one is
// already registered (for example by a second New on the same registry).
func New(opts Options) (*Metrics, error) {
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	claimBuckets, handlerBuckets := opts.ClaimBuckets, opts.HandlerBuckets
	if claimBuckets == nil {
		claimBuckets = DefaultClaimBuckets
	}
	if handlerBuckets == nil {
		handlerBuckets = prometheus.DefBuckets
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "idem", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		claimed:    counter("claimed_total", "Requests that claimed their key and ran the handler.", "adapter"),
		replayed:   counter("replayed_total", "Requests answered with a recorded result.", "adapter"),
		inFlight:   counter("in_flight_total", "Duplicates whose original was still running after the wait (HTTP 409, or a JSON-RPC retry error).", "adapter"),
		mismatched: counter("mismatched_total", "Keys reused for a different request (HTTP 422).", "adapter"),
		completed:  counter("completed_total", "Results recorded.", "adapter"),
		released:   counter("released_total", "Claims released so that a retry runs again (panic, 5xx/408/429, failed commit, shutdown).", "adapter"),
		stale:      counter("stale_total", "Claims lost while the handler ran (lease ran out and the key was taken over, or forgotten).", "adapter"),
		rejected:   counter("rejected_total", "Duplicates the protected handler's own checks refused (origin, auth, protocol headers, session) before the adapter answered them from the store; the client got that refusal.", "adapter"),
		refused: counter("refused_total", "Requests the adapter answered itself because they cannot be deduplicated as sent, by reason "+
			"(missing_key, invalid_key, body_too_large, body_unreadable, unscoped_cookies, invalid_request); the handler did not run.", "adapter", "reason"),
		unprotected: counter("unprotected_total", "Requests that ran without deduplication, by reason (no_key: no key and KeyOptional, "+
			"or an MCP call with nothing to key it by; fail_open: the store failed under FailOpen).", "adapter", "reason"),
		storeErrors: counter("store_errors_total", "Store calls that failed, by operation.", "adapter", "op"),
		swept:       counter("swept_total", "Entries removed by the sweeper: abandoned claims and expired results.", "kind"),
		claimTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "idem", Name: "claim_duration_seconds",
			Help:    "Time to claim a key, including waiting for an in-flight original, by outcome.",
			Buckets: claimBuckets,
		}, []string{"adapter", "outcome"}),
		handlerTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "idem", Name: "handler_duration_seconds",
			Help:    "Time the protected handler ran under its claim, by outcome (completed, released, or left to its lease).",
			Buckets: handlerBuckets,
		}, []string{"adapter", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.claimed, m.replayed, m.inFlight, m.mismatched, m.completed, m.released,
		m.stale, m.rejected, m.refused, m.unprotected, m.storeErrors, m.swept, m.claimTime, m.handlerTime} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, c := range []*prometheus.CounterVec{m.claimed, m.replayed, m.inFlight, m.mismatched, m.completed, m.released, m.stale} {
		c.WithLabelValues(adapterHTTP)
		c.WithLabelValues(adapterMCP)
	}
	m.rejected.WithLabelValues(adapterMCP) // only mcphttp asks its handler first
	for adapter, reasons := range refusals {
		for _, reason := range reasons {
			m.refused.WithLabelValues(adapter, reason)
		}
	}
	for adapter, reasons := range unprotected {
		for _, reason := range reasons {
			m.unprotected.WithLabelValues(adapter, reason)
		}
	}
	m.swept.WithLabelValues("abandoned")
	m.swept.WithLabelValues("expired")
	return m, nil
}

// Observe counts e. It fits middleware.Options.Observer and
// mcphttp.Options.Observer; the adapter label is e.Adapter ("unknown" when
// empty).
func (m *Metrics) Observe(_ *http.Request, e idem.Event) {
	adapter := e.Adapter
	if adapter == "" {
		adapter = "unknown"
	}
	secs := e.Duration.Seconds()
	switch e.Kind {
	case idem.EventClaimed:
		m.claimed.WithLabelValues(adapter).Inc()
		m.claimTime.WithLabelValues(adapter, "claimed").Observe(secs)
	case idem.EventReplayed:
		m.replayed.WithLabelValues(adapter).Inc()
		m.claimTime.WithLabelValues(adapter, "replayed").Observe(secs)
	case idem.EventInFlight:
		m.inFlight.WithLabelValues(adapter).Inc()
		m.claimTime.WithLabelValues(adapter, "in_flight").Observe(secs)
	case idem.EventMismatch:
		m.mismatched.WithLabelValues(adapter).Inc()
	case idem.EventCompleted:
		m.completed.WithLabelValues(adapter).Inc()
		m.handlerTime.WithLabelValues(adapter, "completed").Observe(secs)
	case idem.EventReleased:
		m.released.WithLabelValues(adapter).Inc()
		m.handlerTime.WithLabelValues(adapter, "released").Observe(secs)
	case idem.EventLeft:
		m.handlerTime.WithLabelValues(adapter, "left").Observe(secs)
	case idem.EventStale, idem.EventLeaseLost:
		m.stale.WithLabelValues(adapter).Inc()
	case idem.EventRejected:
		m.rejected.WithLabelValues(adapter).Inc()
	case idem.EventRefused:
		m.refused.WithLabelValues(adapter, e.Reason).Inc()
	case idem.EventUnprotected:
		m.unprotected.WithLabelValues(adapter, e.Reason).Inc()
	case idem.EventStoreError:
		if errors.Is(e.Err, context.Canceled) {
			return // the client left; not the store's fault
		}
		m.storeErrors.WithLabelValues(adapter, e.Op).Inc()
	}
}

// Swept counts what a sweep removed. It fits idem.Sweeper's OnSweep.
func (m *Metrics) Swept(_ context.Context, st idem.SweepStats) {
	m.swept.WithLabelValues("abandoned").Add(float64(st.Abandoned))
	m.swept.WithLabelValues("expired").Add(float64(st.Expired))
}
