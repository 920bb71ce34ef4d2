package main

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the demo's Prometheus metrics, fed by the observer hooks of
// the middleware's observer (adapter="http"), by counting the MCP adapter's
// store calls (adapter="mcp", see observedStore), and by the sweeper.
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
	// demo's readers see them before the first event. MCP has no in-flight
	// count (see observedStore).
	for _, c := range []*prometheus.CounterVec{m.claimed, m.replayed, m.inFlight, m.mismatched, m.completed, m.released, m.stale} {
		c.WithLabelValues("http")
		if c != m.inFlight {
			c.WithLabelValues("mcp")
		}
	}
	m.sweptTotal.WithLabelValues("abandoned")
	m.sweptTotal.WithLabelValues("expired")
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// observeHTTP is the middleware's Observer.
func (m *metrics) observeHTTP(_ *http.Request, e middleware.Event) {
	const adapter = "http"
	secs := e.Duration.Seconds()
	switch e.Kind {
	case middleware.EventClaimed:
		m.claimed.WithLabelValues(adapter).Inc()
		m.claimTime.WithLabelValues(adapter, "claimed").Observe(secs)
	case middleware.EventReplayed:
		m.replayed.WithLabelValues(adapter).Inc()
		m.claimTime.WithLabelValues(adapter, "replayed").Observe(secs)
	case middleware.EventInFlight:
		m.inFlight.WithLabelValues(adapter).Inc()
		m.claimTime.WithLabelValues(adapter, "in_flight").Observe(secs)
	case middleware.EventMismatch:
		m.mismatched.WithLabelValues(adapter).Inc()
	case middleware.EventCompleted:
		m.completed.WithLabelValues(adapter).Inc()
		m.handlerTime.WithLabelValues(adapter, "completed").Observe(secs)
	case middleware.EventReleased:
		m.released.WithLabelValues(adapter).Inc()
		m.handlerTime.WithLabelValues(adapter, "released").Observe(secs)
	case middleware.EventStale:
		m.stale.WithLabelValues(adapter).Inc()
	case middleware.EventStoreError:
		m.storeErrors.WithLabelValues(adapter, e.Op).Inc()
	}
}

func (m *metrics) swept(st idem.SweepStats) {
	m.sweptTotal.WithLabelValues("abandoned").Add(float64(st.Abandoned))
	m.sweptTotal.WithLabelValues("expired").Add(float64(st.Expired))
}

// observedStore counts what the MCP adapter does with its store, because
// mcphttp has no observer hook: every claim that comes back acquired,
// completed (a replay) or mismatched, every completion, release and stale
// token, and store failures. It cannot see a duplicate that is still in
// flight when mcphttp's wait runs out (that is decided after the last
// claim), so idem_in_flight_total has no "mcp" series.
type observedStore struct {
	idem.Store
	m       *metrics
	adapter string
}

func (s observedStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	start := time.Now()
	c, err := s.Store.Claim(ctx, req)
	secs := time.Since(start).Seconds()
	switch {
	case errors.Is(err, idem.ErrFingerprintMismatch):
		s.m.mismatched.WithLabelValues(s.adapter).Inc()
	case err != nil:
		s.storeError("claim", err)
	case c.Status == idem.Acquired:
		s.m.claimed.WithLabelValues(s.adapter).Inc()
		s.m.claimTime.WithLabelValues(s.adapter, "claimed").Observe(secs)
	case c.Status == idem.Completed:
		s.m.replayed.WithLabelValues(s.adapter).Inc()
		s.m.claimTime.WithLabelValues(s.adapter, "replayed").Observe(secs)
	}
	return c, err
}

func (s observedStore) Complete(ctx context.Context, tok idem.Token, res idem.Result) error {
	err := s.Store.Complete(ctx, tok, res)
	s.count(s.m.completed, "complete", err)
	return err
}

func (s observedStore) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	end, err := s.Store.Renew(ctx, tok, lease)
	if err != nil {
		s.count(nil, "renew", err)
	}
	return end, err
}

func (s observedStore) Release(ctx context.Context, tok idem.Token) error {
	err := s.Store.Release(ctx, tok)
	s.count(s.m.released, "release", err)
	return err
}

// count increments ok on success, stale on a stale token, and the store
// errors otherwise.
func (s observedStore) count(ok *prometheus.CounterVec, op string, err error) {
	switch {
	case err == nil:
		if ok != nil {
			ok.WithLabelValues(s.adapter).Inc()
		}
	case errors.Is(err, idem.ErrStaleClaim):
		s.m.stale.WithLabelValues(s.adapter).Inc()
	default:
		s.storeError(op, err)
	}
}

func (s observedStore) storeError(op string, err error) {
	if errors.Is(err, context.Canceled) {
		return // the client left; not the store's fault
	}
	s.m.storeErrors.WithLabelValues(s.adapter, op).Inc()
}
