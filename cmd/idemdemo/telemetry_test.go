package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/demoproc"
)

// lockedBuffer is stdout shared by run and the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// With OTEL_TRACES_EXPORTER=console the demo prints spans on stdout: a
// replayed request's server span has an idem.claim child whose outcome is
// replayed, and nothing printed carries the key in clear.
func TestConsoleTraces(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout lockedBuffer
	env := map[string]string{"OTEL_TRACES_EXPORTER": "console"}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, &stdout, io.Discard)
	}()
	var base string
	for deadline := time.Now().Add(30 * time.Second); base == ""; {
		first, _, _ := strings.Cut(stdout.String(), "\n")
		base, _ = demoproc.ListeningURL(first)
		select {
		case err := <-done:
			t.Fatalf("run returned %v before listening", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the demo never said it was listening")
		}
	}
	const key = "console-traces-key-4c1d"
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 2 {
		req, _ := http.NewRequest("POST", base+"/invoices", strings.NewReader(acme))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create: %s", resp.Status)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}

	out := stdout.String()
	if strings.Contains(out, key) {
		t.Errorf("stdout carries the key %q in clear", key)
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
		Events []struct{ Name string }
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
	var outcomes []string
	for _, s := range spans {
		if s.Name != "idem.claim" {
			continue
		}
		if p := byID[s.Parent.SpanID]; p.Name != "POST /invoices" {
			t.Errorf("idem.claim's parent is %q, want the server span POST /invoices", p.Name)
		}
		for _, a := range s.Attributes {
			if a.Key == "idem.outcome" {
				outcomes = append(outcomes, a.Value.Value.(string))
			}
		}
	}
	if got := strings.Join(outcomes, ","); got != "acquired,replayed" {
		t.Errorf("idem.claim outcomes %q, want acquired,replayed\n%s", got, out)
	}
}

func TestTelemetryConfig(t *testing.T) {
	t.Parallel()
	be := newMemoryBackend(config{})
	defer be.close()
	for _, tc := range []struct {
		env     map[string]string
		on      bool
		wantErr string
	}{
		{env: nil},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, on: true},
		{env: map[string]string{"OTEL_METRICS_EXPORTER": "console"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true}, // no connection until it exports
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, wantErr: `OTEL_TRACES_EXPORTER="jaeger"`},
		{env: map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}, wantErr: "Prometheus is at /metrics"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "http/protobuf only"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"}, wantErr: "http/protobuf only"},
	} {
		tel, err := newTelemetry(context.Background(), func(k string) string { return tc.env[k] }, io.Discard, be)
		if tc.wantErr != "" {
			var ue *usageError
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
