//go:build !otlp

package main

import (
	"context"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem/internal/cmdmain"
)

// otlpBuilt says whether this build exports OTLP (see telemetry): not
// without -tags otlp.
const otlpBuilt = false

// noOTLP is the usage error of an otlp exporter that variable asks of a
// build without it.
func noOTLP(variable string) error {
	return cmdmain.Usagef("%s=otlp: this demo is built without OTLP, which brings gRPC's modules into the build; build it with -tags otlp (go run -tags otlp ./cmd/idemdemo)", variable)
}

func newOTLPTraceExporter(context.Context) (sdktrace.SpanExporter, error) {
	return nil, noOTLP("OTEL_TRACES_EXPORTER")
}

func newOTLPMetricExporter(context.Context) (sdkmetric.Exporter, error) {
	return nil, noOTLP("OTEL_METRICS_EXPORTER")
}
