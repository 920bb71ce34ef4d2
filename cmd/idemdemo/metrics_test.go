package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/mcphttp"
)

// TestMetricsCountEveryEvent: each event kind an adapter reports moves its
// own series, as /metrics exports it, and no other.
func TestMetricsCountEveryEvent(t *testing.T) {
	t.Parallel()
	m := newMetrics()
	scrape := func(series string) string {
		t.Helper()
		rec := httptest.NewRecorder()
		m.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return metricValue(rec.Body.String(), series)
	}
	if got := scrape(`idem_rejected_total{adapter="mcp"}`); got != "0" {
		t.Errorf("before any event: idem_rejected_total = %q, want 0", got)
	}
	m.observe(nil, mcphttp.AdapterName, idem.Event{Kind: idem.EventRejected, Status: 403})
	m.observe(nil, mcphttp.AdapterName, idem.Event{Kind: idem.EventLeaseLost})
	for series, want := range map[string]string{
		`idem_rejected_total{adapter="mcp"}`: "1",
		`idem_stale_total{adapter="mcp"}`:    "1",
		`idem_released_total{adapter="mcp"}`: "0",
	} {
		if got := scrape(series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
}
