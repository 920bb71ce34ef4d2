package idemprom_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemprom"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCounters drives the middleware through each outcome and reads the
// counters as Prometheus exposes them: the names and labels operators'
// alerts use.
func TestCounters(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := idemprom.New(idemprom.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	h := middleware.New(memstore.New(memstore.Options{}), middleware.Options{Observer: m.Observe, MaxBodyBytes: 16})(handler)
	send := func(h http.Handler, path, body string, header ...string) {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		for i := 0; i < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	post := func(path, key, body string) { send(h, path, body, "Idempotency-Key", key) }
	post("/orders", "a", "{}")
	post("/orders", "a", "{}")      // replayed
	post("/orders", "a", `{"x":1}`) // mismatched
	post("/fail", "b", "{}")        // released
	// Refused, by reason: the handler does not run.
	send(h, "/orders", "{}")                                            // missing_key
	post("/orders", "", "{}")                                           // invalid_key
	post("/orders", "c", strings.Repeat("x", 17))                       // body_too_large
	send(h, "/orders", "{}", "Idempotency-Key", "d", "Cookie", "sid=1") // unscoped_cookies
	// Unprotected, by reason: the handler runs without deduplication.
	optional := middleware.New(memstore.New(memstore.Options{}), middleware.Options{Observer: m.Observe, KeyOptional: true})(handler)
	send(optional, "/orders", "{}") // no_key
	failOpen := middleware.New(downStore{memstore.New(memstore.Options{})}, middleware.Options{Observer: m.Observe, FailOpen: true})(handler)
	send(failOpen, "/orders", "{}", "Idempotency-Key", "e") // fail_open
	m.Swept(t.Context(), idem.SweepStats{Abandoned: 2, Expired: 5})
	m.Observe(nil, idem.Event{Kind: idem.EventStoreError, Adapter: "mcp", Op: "claim"})
	m.Observe(nil, idem.Event{Kind: idem.EventLeft, Adapter: "mcp"})                                           // a duration, no counter
	m.Observe(nil, idem.Event{Kind: idem.EventStoreError, Adapter: "mcp", Op: "claim", Err: context.Canceled}) // the client left: not counted

	const want = `
# HELP idem_claimed_total Requests that claimed their key and ran the handler.
# TYPE idem_claimed_total counter
idem_claimed_total{adapter="http"} 2
idem_claimed_total{adapter="mcp"} 0
# HELP idem_completed_total Results recorded.
# TYPE idem_completed_total counter
idem_completed_total{adapter="http"} 1
idem_completed_total{adapter="mcp"} 0
# HELP idem_in_flight_total Duplicates whose original was still running after the wait (HTTP 409, or a JSON-RPC retry error).
# TYPE idem_in_flight_total counter
idem_in_flight_total{adapter="http"} 0
idem_in_flight_total{adapter="mcp"} 0
# HELP idem_mismatched_total Keys reused for a different request (HTTP 422).
# TYPE idem_mismatched_total counter
idem_mismatched_total{adapter="http"} 1
idem_mismatched_total{adapter="mcp"} 0
# HELP idem_refused_total Requests the adapter answered itself because they cannot be deduplicated as sent, by reason (missing_key, invalid_key, body_too_large, body_unreadable, unscoped_cookies, invalid_request); the handler did not run.
# TYPE idem_refused_total counter
idem_refused_total{adapter="http",reason="body_too_large"} 1
idem_refused_total{adapter="http",reason="body_unreadable"} 0
idem_refused_total{adapter="http",reason="invalid_key"} 1
idem_refused_total{adapter="http",reason="missing_key"} 1
idem_refused_total{adapter="http",reason="unscoped_cookies"} 1
idem_refused_total{adapter="mcp",reason="invalid_key"} 0
idem_refused_total{adapter="mcp",reason="invalid_request"} 0
idem_refused_total{adapter="mcp",reason="unscoped_cookies"} 0
# HELP idem_rejected_total Duplicates the protected handler's own checks refused (origin, auth, protocol headers, session) before the adapter answered them from the store; the client got that refusal.
# TYPE idem_rejected_total counter
idem_rejected_total{adapter="mcp"} 0
# HELP idem_released_total Claims released so that a retry runs again (panic, 5xx/408/429, failed commit, shutdown).
# TYPE idem_released_total counter
idem_released_total{adapter="http"} 1
idem_released_total{adapter="mcp"} 0
# HELP idem_replayed_total Requests answered with a recorded result.
# TYPE idem_replayed_total counter
idem_replayed_total{adapter="http"} 1
idem_replayed_total{adapter="mcp"} 0
# HELP idem_stale_total Claims lost while the handler ran (lease ran out and the key was taken over, or forgotten).
# TYPE idem_stale_total counter
idem_stale_total{adapter="http"} 0
idem_stale_total{adapter="mcp"} 0
# HELP idem_store_errors_total Store calls that failed, by operation.
# TYPE idem_store_errors_total counter
idem_store_errors_total{adapter="http",op="claim"} 1
idem_store_errors_total{adapter="mcp",op="claim"} 1
# HELP idem_swept_total Entries removed by the sweeper: abandoned claims and expired results.
# TYPE idem_swept_total counter
idem_swept_total{kind="abandoned"} 2
idem_swept_total{kind="expired"} 5
# HELP idem_unprotected_total Requests that ran without deduplication, by reason (no_key: no key and KeyOptional, or an MCP call with nothing to key it by; fail_open: the store failed under FailOpen).
# TYPE idem_unprotected_total counter
idem_unprotected_total{adapter="http",reason="fail_open"} 1
idem_unprotected_total{adapter="http",reason="no_key"} 1
idem_unprotected_total{adapter="mcp",reason="no_key"} 0
`
	exposed := scrape(t, reg)
	if got := counters(exposed); got != strings.TrimPrefix(want, "\n") {
		t.Errorf("counters:\n%s\nwant:\n%s", got, want)
	}
	// Durations by outcome: claimed and replayed claims (a mismatch has
	// none), completed, released and left runs.
	for _, series := range []string{
		`idem_claim_duration_seconds_count{adapter="http",outcome="claimed"} 2`,
		`idem_claim_duration_seconds_count{adapter="http",outcome="replayed"} 1`,
		`idem_handler_duration_seconds_count{adapter="http",outcome="completed"} 1`,
		`idem_handler_duration_seconds_count{adapter="http",outcome="released"} 1`,
		`idem_handler_duration_seconds_count{adapter="mcp",outcome="left"} 1`,
	} {
		if !strings.Contains(exposed, "\n"+series+"\n") {
			t.Errorf("no %s in:\n%s", series, exposed)
		}
	}
}

// scrape returns reg's exposition, as Prometheus reads it.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return w.Body.String()
}

// counters is the counters' part of an exposition: its lines up to the
// first histogram.
func counters(exposed string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(exposed, "\n") {
		if strings.Contains(line, "_duration_seconds") {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

func TestNewTwiceOnOneRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := idemprom.New(idemprom.Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := idemprom.New(idemprom.Options{Registerer: reg}); err == nil {
		t.Error("a second New on the same registry: no error")
	}
}

// downStore fails every claim, as an unreachable store does.
type downStore struct{ idem.Store }

func (downStore) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, &idem.UnavailableError{Op: "claim", Err: errors.New("connection refused")}
}
