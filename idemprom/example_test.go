package idemprom_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem/idemprom"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// The middleware's events as Prometheus counters: a request and its retry
// are one claim and one replay.
func Example() {
	reg := prometheus.NewRegistry()
	m, err := idemprom.New(idemprom.Options{Registerer: reg})
	if err != nil {
		panic(err)
	}
	protect := middleware.New(memstore.New(memstore.Options{}), middleware.Options{Observer: m.Observe})
	mux := http.NewServeMux()
	mux.Handle("POST /orders", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	for range 2 { // a request and its retry
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":7}`))
		r.Header.Set("Idempotency-Key", "order-42")
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for sc := bufio.NewScanner(w.Body); sc.Scan(); {
		if line := sc.Text(); strings.Contains(line, `{adapter="http"}`) && !strings.HasSuffix(line, " 0") {
			fmt.Println(line)
		}
	}
	// Output:
	// idem_claimed_total{adapter="http"} 1
	// idem_completed_total{adapter="http"} 1
	// idem_replayed_total{adapter="http"} 1
}
