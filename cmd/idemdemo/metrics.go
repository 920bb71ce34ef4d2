package main

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idemprom"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/middleware"
)

// metrics are the demo's Prometheus metrics, served at /metrics: idem's,
// from package idemprom (idem_claimed_total{adapter}, ...; the names
// docs/operations.md's alerts, docs/demo.md and outside checks read), and
// the Go runtime's and the process's. They are idemprom's rather than
// idemotel's instruments through the OpenTelemetry Prometheus exporter,
// which would publish idemotel's semantic-convention names instead
// (idem_requests_total{idem_outcome}, with otel_scope_* labels and
// target_info). With OTEL_METRICS_EXPORTER set, idemotel's metrics go to
// that exporter as well; see telemetry.go.
//
// They are fed by the observer hooks of the middleware (adapter="http")
// and of mcphttp (adapter="mcp"), and by the sweeper.
type metrics struct {
	reg  *prometheus.Registry
	prom *idemprom.Metrics

	// otel, when OpenTelemetry is on (see newTelemetry), receives every
	// event as well.
	otel *idemotel.Observer
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	prom, err := idemprom.New(idemprom.Options{Registerer: reg})
	if err != nil {
		panic(err) // a fresh registry holds none of idem's collectors
	}
	return &metrics{reg: reg, prom: prom}
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// observeHTTP is the middleware's Observer.
func (m *metrics) observeHTTP(r *http.Request, e idem.Event) { m.observe(r, middleware.AdapterName, e) }

// observeMCP is mcphttp's Observer.
func (m *metrics) observeMCP(r *http.Request, e idem.Event) { m.observe(r, mcphttp.AdapterName, e) }

func (m *metrics) observe(r *http.Request, adapter string, e idem.Event) {
	if e.Adapter == "" {
		e.Adapter = adapter
	}
	if m.otel != nil {
		m.otel.Observe(r, e)
	}
	m.prom.Observe(r, e)
}

func (m *metrics) swept(st idem.SweepStats) {
	if m.otel != nil {
		m.otel.Swept(context.Background(), st)
	}
	m.prom.Swept(context.Background(), st)
}
