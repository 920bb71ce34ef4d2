package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/internal/cmdmain"
)

// telemetry is the demo's OpenTelemetry pipeline, off unless the standard
// environment variables ask for it:
//
//	OTEL_TRACES_EXPORTER   console (JSON spans on stdout), otlp, none
//	OTEL_METRICS_EXPORTER  console (JSON metrics on stdout), otlp, none
//	OTEL_SDK_DISABLED=true turns both off
//
// Unset means none: the demo needs no collector. otlp is in a build with
// -tags otlp only (telemetry_otlp.go): OpenTelemetry's OTLP exporters
// import the collector's generated gRPC services even over HTTP, which
// would put gRPC and its dependencies (over 100 packages) into every
// build of the demo. It speaks http/protobuf (OTEL_EXPORTER_OTLP_PROTOCOL
// may say so, or be unset); the exporters read OTEL_EXPORTER_OTLP_ENDPOINT
// and the other OTEL_EXPORTER_OTLP_* variables, OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES themselves, and connect only when they export.
// With either exporter on, requests get a server span (otelhttp) and
// idemotel reports idem's events on it.
type telemetry struct {
	tp       *sdktrace.TracerProvider // nil: no traces
	mp       *sdkmetric.MeterProvider // nil: no OpenTelemetry metrics
	observer *idemotel.Observer       // nil: telemetry off
}

func newTelemetry(ctx context.Context, getenv func(string) string, stdout io.Writer, be *backend) (*telemetry, error) {
	t := &telemetry{}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return t, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "idemdemo")),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES override
		resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	switch v := getenv("OTEL_TRACES_EXPORTER"); v {
	case "", "none":
	case "console":
		exp, err := stdouttrace.New(stdouttrace.WithWriter(stdout))
		if err != nil {
			return nil, err
		}
		// Synchronous: each span is printed as it ends, which is what
		// someone watching the console expects.
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	case "otlp":
		if err := otlpHTTP(getenv, "TRACES"); err != nil {
			return nil, err
		}
		exp, err := newOTLPTraceExporter(ctx)
		if err != nil {
			return nil, err
		}
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	default:
		return nil, cmdmain.Usagef("OTEL_TRACES_EXPORTER=%q: want console, otlp or none", v)
	}
	var reader sdkmetric.Reader
	switch v := getenv("OTEL_METRICS_EXPORTER"); v {
	case "", "none":
	case "console":
		exp, err := stdoutmetric.New(stdoutmetric.WithWriter(stdout))
		if err != nil {
			return nil, errors.Join(err, t.shutdown(ctx))
		}
		reader = sdkmetric.NewPeriodicReader(exp) // OTEL_METRIC_EXPORT_INTERVAL, default 60s
	case "otlp":
		if err := otlpHTTP(getenv, "METRICS"); err != nil {
			return nil, errors.Join(err, t.shutdown(ctx))
		}
		exp, err := newOTLPMetricExporter(ctx)
		if err != nil {
			return nil, errors.Join(err, t.shutdown(ctx))
		}
		reader = sdkmetric.NewPeriodicReader(exp)
	default:
		err := cmdmain.Usagef("OTEL_METRICS_EXPORTER=%q: want console, otlp or none (Prometheus is at /metrics)", v)
		return nil, errors.Join(err, t.shutdown(ctx))
	}
	if reader != nil {
		t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	}
	if t.tp == nil && t.mp == nil {
		return t, nil
	}
	opts := idemotel.Options{TracerProvider: t.tracerProvider(), MeterProvider: t.meterProvider(), Store: be.name}
	if c, ok := be.store.(interface{ ReplayCacheHits() int64 }); ok {
		opts.ReplayCacheHits = c.ReplayCacheHits
	}
	if t.observer, err = idemotel.New(opts); err != nil {
		return nil, errors.Join(err, t.shutdown(ctx))
	}
	return t, nil
}

// otlpHTTP refuses an OTLP protocol other than http/protobuf for signal
// (TRACES, METRICS).
func otlpHTTP(getenv func(string) string, signal string) error {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch v := getenv(name); v {
		case "":
			continue
		case "http/protobuf":
			return nil
		default:
			return cmdmain.Usagef("%s=%q: the demo exports OTLP over http/protobuf only", name, v)
		}
	}
	return nil
}

func (t *telemetry) tracerProvider() trace.TracerProvider {
	if t.tp == nil {
		return tracenoop.NewTracerProvider()
	}
	return t.tp
}

func (t *telemetry) meterProvider() metric.MeterProvider {
	if t.mp == nil {
		return metricnoop.NewMeterProvider()
	}
	return t.mp
}

// instrument gives each request a server span (and otelhttp's
// http.server.* metrics), the span idemotel annotates. /metrics and
// /healthz, polled by scrapers and probes, get none.
func (t *telemetry) instrument(h http.Handler) http.Handler {
	if t.observer == nil {
		return h
	}
	return otelhttp.NewHandler(h, "idemdemo",
		otelhttp.WithTracerProvider(t.tracerProvider()),
		otelhttp.WithMeterProvider(t.meterProvider()),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Path != "/metrics" && r.URL.Path != "/healthz" }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }))
}

// shutdown flushes what is buffered, for at most five seconds.
func (t *telemetry) shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.Shutdown(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}
