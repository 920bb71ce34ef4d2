package idemotel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// Mount the Observer on the middleware, export with the stdout exporters,
// and send a request and its retry. A real service wraps its mux with
// otelhttp.NewHandler for the server span; this example starts it by hand
// to stay within the SDK. The exporters write JSON; the example prints the
// span names and outcomes from it.
func Example() {
	var traces, metrics bytes.Buffer
	spanExporter, _ := stdouttrace.New(stdouttrace.WithWriter(&traces))
	metricExporter, _ := stdoutmetric.New(stdoutmetric.WithWriter(&metrics))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spanExporter))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metricExporter)))

	obs, err := idemotel.New(idemotel.Options{TracerProvider: tp, MeterProvider: mp, Store: "memory"})
	if err != nil {
		panic(err)
	}
	protect := middleware.New(memstore.New(memstore.Options{}), middleware.Options{Observer: obs.Observe})
	api := protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))

	server := tp.Tracer("example")
	for range 2 { // a request and its retry
		req := httptest.NewRequest(http.MethodPost, "/invoices", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Idempotency-Key", "order-42")
		ctx, span := server.Start(req.Context(), "POST /invoices", trace.WithSpanKind(trace.SpanKindServer))
		api.ServeHTTP(httptest.NewRecorder(), req.WithContext(ctx))
		span.End()
	}
	_ = tp.Shutdown(context.Background())
	_ = mp.Shutdown(context.Background()) // exports the metrics

	for dec := json.NewDecoder(&traces); dec.More(); {
		var span struct {
			Name       string
			Attributes []struct {
				Key   string
				Value struct{ Value any }
			}
			Events []struct{ Name string }
		}
		if err := dec.Decode(&span); err != nil {
			panic(err)
		}
		line := "span " + span.Name
		for _, a := range span.Attributes {
			if a.Key == "idem.outcome" {
				line += " outcome " + fmt.Sprint(a.Value.Value)
			}
		}
		for _, e := range span.Events {
			line += " event " + e.Name
		}
		fmt.Println(line)
	}
	var names []string
	for dec := json.NewDecoder(&metrics); dec.More(); {
		var rm struct {
			ScopeMetrics []struct{ Metrics []struct{ Name string } }
		}
		if err := dec.Decode(&rm); err != nil {
			panic(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				names = append(names, m.Name)
			}
		}
	}
	slices.Sort(names)
	fmt.Println("metrics", strings.Join(names, " "))
	// Output:
	// span idem.claim outcome acquired
	// span POST /invoices event idem.complete
	// span idem.claim outcome replayed
	// span POST /invoices
	// metrics idem.active_claims idem.claim.duration idem.execution.duration idem.requests
}
