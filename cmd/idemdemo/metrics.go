package main

import (
	"context"
	"errors"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the demo's Prometheus metrics, served at /metrics. They stay
// written with client_golang rather than derived from idemotel's instruments
// through the OpenTelemetry Prometheus exporter: their names
// (idem_claimed_total{adapter}, idem_claim_duration_seconds, ...) are the
// contract docs/operations.md's alerts, docs/demo.md and outside checks read,
// and the exporter would publish idemotel's semantic-convention names
// instead (idem_requests_total{idem_outcome}, with otel_scope_* labels and
// target_info). With OTEL_METRICS_EXPORTER set, idemotel's metrics go to
// that exporter as well; see telemetry.go.
//
// The metrics are fed by the observer hooks of the
// middleware (adapter="http") and of mcphttp (adapter="mcp"), and by the
// sweeper.
// Keys and scopes never become labels: they are client data, unbounded.
type metrics struct {
	reg *prometheus.Registry

	claimed     *prometheus.CounterVec
	replayed    *prometheus.CounterVec
	inFlight    *prometheus.CounterVec
	mismatched  *prometheus.CounterVec
	completed   *prometheus.CounterVec
	released    *prometheus.CounterVec
	stale       *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
	sweptTotal  *prometheus.CounterVec
	claimTime   *prometheus.HistogramVec
	handlerTime *prometheus.HistogramVec

	// otel, when OpenTelemetry is on (see newTelemetry), receives every
	// event as well.
	otel *idemotel.Observer
}

func newMetrics() *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "idem", Name: name, Help: help}, labels)
	}
	m := &metrics{
		reg:         prometheus.NewRegistry(),
		claimed:     counter("claimed_total", "Requests that claimed their key and ran the handler.", "adapter"),
		replayed:    counter("replayed_total", "Requests answered with a recorded result.", "adapter"),
		inFlight:    counter("in_flight_total", "Duplicates whose original was still running after the wait (HTTP 409, or a JSON-RPC retry error).", "adapter"),
		mismatched:  counter("mismatched_total", "Keys reused for a different request (HTTP 422).", "adapter"),
		completed:   counter("completed_total", "Results recorded.", "adapter"),
		released:    counter("released_total", "Claims released so that a retry runs again (panic, 5xx/408/429, failed commit, shutdown).", "adapter"),
		stale:       counter("stale_total", "Claims lost while the handler ran (lease ran out and the key was taken over, or forgotten).", "adapter"),
		storeErrors: counter("store_errors_total", "Store calls that failed, by operation.", "adapter", "op"),
		sweptTotal:  counter("swept_total", "Entries removed by the sweeper: abandoned claims and expired results.", "kind"),
		claimTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "idem", Name: "claim_duration_seconds",
			Help:    "Time to claim a key, including waiting for an in-flight original, by outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"adapter", "outcome"}),
		handlerTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "idem", Name: "handler_duration_seconds",
			Help:    "Time the protected handler ran under its claim, by outcome (completed or released).",
			Buckets: prometheus.DefBuckets,
		}, []string{"adapter", "outcome"}),
	}
	m.reg.MustRegister(m.claimed, m.replayed, m.inFlight, m.mismatched, m.completed, m.released,
		m.stale, m.storeErrors, m.sweptTotal, m.claimTime, m.handlerTime,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Export every series at zero from the start, so dashboards and the
	// demo's readers see them before the first event.
	for _, c := range []*prometheus.CounterVec{m.claimed, m.replayed, m.inFlight, m.mismatched, m.completed, m.released, m.stale} {
		c.WithLabelValues("http")
		c.WithLabelValues("mcp")
	}
	m.sweptTotal.WithLabelValues("abandoned")
	m.sweptTotal.WithLabelValues("expired")
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// observeHTTP is the middleware's Observer.
func (m *metrics) observeHTTP(r *http.Request, e idem.Event) { m.observe(r, idem.AdapterHTTP, e) }

// observeMCP is mcphttp's Observer.
func (m *metrics) observeMCP(r *http.Request, e idem.Event) { m.observe(r, idem.AdapterMCP, e) }

func (m *metrics) observe(r *http.Request, adapter string, e idem.Event) {
	if m.otel != nil {
		if e.Adapter == "" {
			e.Adapter = adapter
		}
		m.otel.Observe(r, e)
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
	case idem.EventStale, idem.EventLeaseLost:
		m.stale.WithLabelValues(adapter).Inc()
	case idem.EventStoreError:
		if errors.Is(e.Err, context.Canceled) {
			return // the client left; not the store's fault
		}
		m.storeErrors.WithLabelValues(adapter, e.Op).Inc()
	}
}

func (m *metrics) swept(st idem.SweepStats) {
	if m.otel != nil {
		m.otel.Swept(context.Background(), st)
	}
	m.sweptTotal.WithLabelValues("abandoned").Add(float64(st.Abandoned))
	m.sweptTotal.WithLabelValues("expired").Add(float64(st.Expired))
}
