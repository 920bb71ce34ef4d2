package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/internal/cmdmain"
	"github.com/idemkit/idem/internal/demoproc"
)

// With OTEL_TRACES_EXPORTER=console the demo prints spans on stdout: a
// replayed request's server span has an idem.claim child whose outcome is
// replayed, over HTTP and over MCP, and nothing printed carries a key in
// clear.
func TestConsoleTraces(t *testing.T) {
	t.Parallel()
	d := &demo{Process: demoproc.Start(t, demoproc.Config{Binary: demoBinary, Env: []string{"OTEL_TRACES_EXPORTER=console"}}),
		t: t, client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}}
	const httpKey, mcpKey = "console-traces-key-4c1d", "console-traces-mcp-key-9e2b"
	for range 2 {
		if r := d.do("POST", "/invoices", httpKey, acme); r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
	}
	for range 2 {
		callTool(t, d, map[string]any{"customer": "acme", "amount_cents": 1200}, mcp.Meta{"idempotencyKey": mcpKey})
	}
	d.Stop()

	out := d.Stdout().String()
	for _, key := range []string{httpKey, mcpKey} {
		if strings.Contains(out, key) {
			t.Errorf("stdout carries the key %q in clear", key)
		}
	}
	_, spansJSON, _ := strings.Cut(out, "\n") // after the listening line
	type span struct {
		Name        string
		SpanContext struct{ SpanID string }
		Parent      struct{ SpanID string }
		Attributes  []struct {
			Key   string
			Value struct{ Value any }
		}
	}
	var spans []span
	for dec := json.NewDecoder(strings.NewReader(spansJSON)); dec.More(); {
		var s span
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("stdout is not a stream of JSON spans: %v\n%s", err, out)
		}
		spans = append(spans, s)
	}
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID] = s
	}
	// adapter -> the outcomes of its claims, with the span they hang from
	var claims []string
	for _, s := range spans {
		if s.Name != "idem.claim" {
			continue
		}
		attrs := map[string]any{}
		for _, a := range s.Attributes {
			attrs[a.Key] = a.Value.Value
		}
		claims = append(claims, fmt.Sprintf("%v %v under %s", attrs["idem.adapter"], attrs["idem.outcome"], byID[s.Parent.SpanID].Name))
	}
	got := strings.Join(claims, "; ")
	for _, want := range []string{
		"http acquired under POST /invoices; http replayed under POST /invoices",
		"mcp acquired under POST /mcp",
		"mcp replayed under POST /mcp",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("idem.claim spans: %s\nwant %q among them", got, want)
		}
	}
}

// TestTelemetryConfig: the OTEL_* variables the demo reads. otlp is in a
// build with -tags otlp only (make test runs this test both ways): without
// it, asking for otlp is a usage error that says how to build it.
func TestTelemetryConfig(t *testing.T) {
	t.Parallel()
	be := newMemoryBackend(config{})
	defer be.close()
	type testCase struct {
		env     map[string]string
		on      bool
		wantErr string
	}
	otlp := []testCase{
		// A span exporter connects only when it exports.
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
	}
	if !otlpBuilt {
		const how = "=otlp: this demo is built without OTLP, which brings gRPC's modules into the build; build it with -tags otlp (go run -tags otlp ./cmd/idemdemo)"
		otlp = []testCase{
			{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, wantErr: "OTEL_TRACES_EXPORTER" + how},
			{env: map[string]string{"OTEL_METRICS_EXPORTER": "otlp"}, wantErr: "OTEL_METRICS_EXPORTER" + how},
		}
	}
	for _, tc := range append(otlp, []testCase{
		{env: nil},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, on: true},
		{env: map[string]string{"OTEL_METRICS_EXPORTER": "console"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, wantErr: `OTEL_TRACES_EXPORTER="jaeger"`},
		{env: map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}, wantErr: "Prometheus is at /metrics"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "http/protobuf only"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"}, wantErr: "http/protobuf only"},
	}...) {
		tel, err := newTelemetry(t.Context(), func(k string) string { return tc.env[k] }, io.Discard, be)
		if tc.wantErr != "" {
			var ue *cmdmain.UsageError
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &ue) {
				t.Errorf("%v: err = %v, want a usage error with %q", tc.env, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		if on := tel.observer != nil; on != tc.on {
			t.Errorf("%v: telemetry on = %v, want %v", tc.env, on, tc.on)
		}
		if err := tel.shutdown(context.Background()); err != nil {
			t.Errorf("%v: shutdown: %v", tc.env, err)
		}
	}
}
