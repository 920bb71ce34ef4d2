package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/memclock"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The scope and key the tests use: distinctive strings that must never
// show up in an attribute.
const (
	secretScope = "tenant-7f3a-scope-in-clear"
	secretKey   = "key-b9e1-in-clear"
)

// fixture is an Observer on the SDK's in-memory span recorder and manual
// metric reader, mounted on the middleware over a memstore, behind a
// handler that starts the request's server span (what otelhttp does).
type fixture struct {
	t       *testing.T
	spans   *tracetest.SpanRecorder
	reader  *sdkmetric.ManualReader
	obs     *idemotel.Observer
	clock   *idemtest.Clock
	tracer  trace.Tracer // the recorder's, for server spans
	handler http.Handler

	events idemtest.Events // every event the Observer saw
}

// setup mounts the Observer on the middleware in front of work.
func setup(t *testing.T, mwOpts middleware.Options, work http.HandlerFunc) *fixture {
	t.Helper()
	f := newFixture(t)
	mwOpts.Scope = func(*http.Request) string { return secretScope }
	mwOpts.Observer = f.observe
	store := memclock.New(memstore.Options{}, f.clock.Now)
	f.handler = f.serverSpan(middleware.New(store, mwOpts)(work))
	return f
}

// serverSpan wraps h with what otelhttp does: a server span in the
// request's context.
func (f *fixture) serverSpan(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := f.tracer.Start(r.Context(), r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// newFixture makes the providers and the Observer.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), clock: idemtest.NewClock()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	obs, err := idemotel.New(idemotel.Options{TracerProvider: tp, MeterProvider: mp, Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	f.obs = obs
	f.tracer = tp.Tracer("test")
	return f
}

func (f *fixture) observe(r *http.Request, e idem.Event) {
	f.events.Observe(e)
	f.obs.Observe(r, e)
}

func (f *fixture) post(body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/invoices", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", secretKey)
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	return rec
}

func ok(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":1}`)
}

// claimSpans returns the idem.claim spans, in the order they ended.
func (f *fixture) claimSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range f.spans.Ended() {
		if s.Name() == "idem.claim" {
			out = append(out, s)
		}
	}
	return out
}

// spanEvents returns the names of the events on the server spans.
func (f *fixture) spanEvents() []string {
	var out []string
	for _, s := range f.spans.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			for _, e := range s.Events() {
				out = append(out, e.Name)
			}
		}
	}
	return out
}

func attr(kvs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, what string, kvs []attribute.KeyValue, k attribute.Key, want string) {
	t.Helper()
	v, found := attr(kvs, k)
	if !found {
		t.Errorf("%s: no %s attribute in %v", what, k, kvs)
		return
	}
	if got := v.String(); got != want {
		t.Errorf("%s: %s = %q, want %q", what, k, got, want)
	}
}

// metrics collects the reader's metrics by name.
func (f *fixture) metrics() map[string]metricdata.Aggregation {
	f.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		f.t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != idemotel.ScopeName {
			f.t.Errorf("metric scope %q, want %q", sm.Scope.Name, idemotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sum returns the value of the integer sum metric name at the point whose
// attributes include all of match (an attribute key and its value).
func (f *fixture) sum(name string, match ...attribute.KeyValue) int64 {
	f.t.Helper()
	data, found := f.metrics()[name]
	if !found {
		return 0
	}
	s, isSum := data.(metricdata.Sum[int64])
	if !isSum {
		f.t.Fatalf("%s is %T, want an int64 sum", name, data)
	}
	var total int64
	for _, p := range s.DataPoints {
		if hasAll(p.Attributes, match) {
			total += p.Value
		}
	}
	return total
}

// histogramCount returns the number of observations of histogram name at
// the points whose attributes include all of match.
func (f *fixture) histogramCount(name string, match ...attribute.KeyValue) (count uint64, sum float64) {
	f.t.Helper()
	data, found := f.metrics()[name]
	if !found {
		return 0, 0
	}
	h, isHist := data.(metricdata.Histogram[float64])
	if !isHist {
		f.t.Fatalf("%s is %T, want a float64 histogram", name, data)
	}
	for _, p := range h.DataPoints {
		if hasAll(p.Attributes, match) {
			count += p.Count
			sum += p.Sum
		}
	}
	return count, sum
}

func hasAll(set attribute.Set, match []attribute.KeyValue) bool {
	for _, kv := range match {
		if v, found := set.Value(kv.Key); !found || v != kv.Value {
			return false
		}
	}
	return true
}

var (
	store   = idemotel.AttrStore.String("memory")
	outcome = idemotel.AttrOutcome.String
)

// noClearText checks that no attribute of any span, span event or metric
// point carries a scope or a key the Observer was given, in clear.
func (f *fixture) noClearText() {
	f.t.Helper()
	secrets := []string{secretScope, secretKey}
	for _, e := range f.events.All() {
		secrets = append(secrets, e.Scope, e.Key.String())
	}
	check := func(where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			for _, s := range secrets {
				if s != "" && strings.Contains(kv.Value.String(), s) {
					f.t.Errorf("%s: attribute %s = %q carries %q in clear", where, kv.Key, kv.Value.String(), s)
				}
			}
		}
	}
	for _, s := range f.spans.Ended() {
		check("span "+s.Name(), s.Attributes())
		for _, e := range s.Events() {
			check("span event "+e.Name, e.Attributes)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		f.t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					check("metric "+m.Name, p.Attributes.ToSlice())
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					check("metric "+m.Name, p.Attributes.ToSlice())
				}
			default:
				f.t.Errorf("metric %s has unexpected data %T", m.Name, m.Data)
			}
		}
	}
}

// A replay through the middleware: the first request's claim span says
// acquired and its server span gets idem.complete; the retry's claim span
// says replayed; the counters and histograms follow.
func TestReplay(t *testing.T) {
	t.Parallel()
	f := setup(t, middleware.Options{}, ok)
	for range 2 {
		if rec := f.post(`{"amount":1}`); rec.Code != http.StatusCreated {
			t.Fatalf("status %d, want 201", rec.Code)
		}
	}

	claims := f.claimSpans()
	if len(claims) != 2 {
		t.Fatalf("%d idem.claim spans, want 2", len(claims))
	}
	wantAttr(t, "first claim", claims[0].Attributes(), idemotel.AttrOutcome, "acquired")
	wantAttr(t, "retry's claim", claims[1].Attributes(), idemotel.AttrOutcome, "replayed")
	digest := idem.KeyDigest(f.events.All()[0].Scope, f.events.All()[0].Key)
	for _, s := range claims {
		wantAttr(t, "claim", s.Attributes(), idemotel.AttrKeyDigest, digest)
		wantAttr(t, "claim", s.Attributes(), idemotel.AttrStore, "memory")
		if !s.Parent().IsValid() || s.Parent().SpanID() == s.SpanContext().SpanID() {
			t.Errorf("claim span has no parent: %v", s.Parent())
		}
		if s.EndTime().Before(s.StartTime()) {
			t.Errorf("claim span ends %v before it starts %v", s.EndTime(), s.StartTime())
		}
	}
	if got, want := strings.Join(f.spanEvents(), ","), "idem.complete"; got != want {
		t.Errorf("server span events %q, want %q", got, want)
	}
	for _, s := range f.spans.Ended() {
		for _, e := range s.Events() {
			if e.Name == "idem.complete" {
				wantAttr(t, "idem.complete", e.Attributes, idemotel.AttrResultStatus, "201")
			}
		}
	}

	if n := f.sum("idem.requests", store, outcome("acquired")); n != 1 {
		t.Errorf("idem.requests{acquired} = %d, want 1", n)
	}
	if n := f.sum("idem.requests", store, outcome("replayed")); n != 1 {
		t.Errorf("idem.requests{replayed} = %d, want 1", n)
	}
	if n, _ := f.histogramCount("idem.claim.duration", outcome("replayed")); n != 1 {
		t.Errorf("idem.claim.duration{replayed} count = %d, want 1", n)
	}
	if n, _ := f.histogramCount("idem.execution.duration", idemotel.AttrExecutionOutcome.String("completed")); n != 1 {
		t.Errorf("idem.execution.duration{completed} count = %d, want 1", n)
	}
	if n := f.sum("idem.active_claims"); n != 0 {
		t.Errorf("idem.active_claims = %d after the request ended, want 0", n)
	}
	f.noClearText()
}

// The same Observer on mcphttp: a tools/call repeated with the same
// _meta.idempotencyKey gets claim spans acquired then replayed, and the
// tool runs once.
func TestMCPReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	server := mcp.NewServer(&mcp.Implementation{Name: "invoices", Version: "1"}, nil)
	var runs atomic.Int32
	mcp.AddTool(server, &mcp.Tool{Name: "create_invoice"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "invoice 1"}}}, nil, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	wrapped := mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{Observer: f.observe})(inner)
	srv := httptest.NewServer(f.serverSpan(wrapped))
	defer srv.Close()

	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv.URL, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := &mcp.CallToolParams{Name: "create_invoice", Arguments: map[string]any{},
		Meta: mcp.Meta{"sessionId": secretScope, "idempotencyKey": secretKey}}
	for range 2 {
		if _, err := cs.CallTool(t.Context(), call); err != nil {
			t.Fatal(err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
	// The client has both answers, but the first call's POST may still be
	// finishing on the server: a repeated call that waited wakes when the
	// result is stored, which can be before the first POST's handler has
	// reported the completion and ended its span. Close waits for every
	// handler to return.
	_ = cs.Close()
	srv.Close()
	claims := f.claimSpans()
	if len(claims) != 2 {
		t.Fatalf("%d idem.claim spans, want 2", len(claims))
	}
	wantAttr(t, "first call's claim", claims[0].Attributes(), idemotel.AttrOutcome, "acquired")
	wantAttr(t, "repeated call's claim", claims[1].Attributes(), idemotel.AttrOutcome, "replayed")
	if got := strings.Join(f.spanEvents(), ","); got != "idem.complete" {
		t.Errorf("server span events %q, want one idem.complete (on the first call's POST)", got)
	}
	if n := f.sum("idem.requests", outcome("replayed")); n != 1 {
		t.Errorf("idem.requests{replayed} = %d, want 1", n)
	}
	if n, _ := f.histogramCount("idem.execution.duration", idemotel.AttrExecutionOutcome.String("completed")); n != 1 {
		t.Errorf("idem.execution.duration{completed} count = %d, want 1", n)
	}
	if n := f.sum("idem.active_claims"); n != 0 {
		t.Errorf("idem.active_claims = %d after the calls ended, want 0", n)
	}
	f.noClearText()
}

// A key reused for another body is refused: outcome mismatch, no second
// execution.
func TestMismatch(t *testing.T) {
	t.Parallel()
	f := setup(t, middleware.Options{}, ok)
	f.post(`{"amount":1}`)
	if rec := f.post(`{"amount":2}`); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422", rec.Code)
	}
	claims := f.claimSpans()
	if len(claims) != 2 {
		t.Fatalf("%d idem.claim spans, want 2", len(claims))
	}
	wantAttr(t, "reused key's claim", claims[1].Attributes(), idemotel.AttrOutcome, "mismatch")
	if n := f.sum("idem.requests", outcome("mismatch")); n != 1 {
		t.Errorf("idem.requests{mismatch} = %d, want 1", n)
	}
	if n, _ := f.histogramCount("idem.execution.duration"); n != 1 {
		t.Errorf("idem.execution.duration count = %d, want 1 (the mismatch must not run)", n)
	}
	f.noClearText()
}

// A duplicate that arrives while the original runs waits for it and
// replays its result; while the original runs its claim is active.
func TestWaitThenReplay(t *testing.T) {
	t.Parallel()
	running, finish := make(chan struct{}), make(chan struct{})
	f := setup(t, middleware.Options{Engine: engine.Options{Wait: 10 * time.Second}}, func(w http.ResponseWriter, r *http.Request) {
		close(running)
		<-finish
		ok(w, r)
	})
	first := make(chan int)
	go func() { first <- f.post(`{"amount":1}`).Code }()
	<-running
	if n := f.sum("idem.active_claims", store); n != 1 {
		t.Errorf("idem.active_claims = %d while the original runs, want 1", n)
	}
	const held = 50 * time.Millisecond
	time.AfterFunc(held, func() { close(finish) })
	dup := f.post(`{"amount":1}`)
	if code := <-first; code != http.StatusCreated || dup.Code != http.StatusCreated {
		t.Fatalf("statuses %d and %d, want 201 twice", code, dup.Code)
	}
	if dup.Header().Get(middleware.ReplayedHeader) == "" {
		t.Fatalf("the duplicate was not a replay")
	}

	claims := f.claimSpans()
	if len(claims) != 2 {
		t.Fatalf("%d idem.claim spans, want 2", len(claims))
	}
	wantAttr(t, "waiting duplicate's claim", claims[1].Attributes(), idemotel.AttrOutcome, "replayed")
	if d := claims[1].EndTime().Sub(claims[1].StartTime()); d < held/2 {
		t.Errorf("the waiting claim's span lasts %v, want at least %v (it covers the wait)", d, held/2)
	}
	wantAttr(t, "waiting duplicate's claim", claims[1].Attributes(), idemotel.AttrAdapter, "http")
	waited, found := attr(claims[1].Attributes(), idemotel.AttrWaitDuration)
	if !found || waited.AsFloat64() < (held/2).Seconds() {
		t.Errorf("the waiting claim's idem.wait.duration = %v (found %v), want at least %v", waited.AsFloat64(), found, held/2)
	}
	var waits int
	for _, s := range f.spans.Ended() {
		if s.Name() == "idem.wait" && s.Parent().SpanID() == claims[1].SpanContext().SpanID() {
			waits++
		}
	}
	if waits != 1 {
		t.Errorf("%d idem.wait spans under the waiting claim, want 1", waits)
	}
	if n, secs := f.histogramCount("idem.wait.duration", outcome("replayed")); n != 1 || secs < (held/2).Seconds() {
		t.Errorf("idem.wait.duration{replayed}: count %d sum %vs, want 1 observation of at least %v", n, secs, held/2)
	}
	if n, secs := f.histogramCount("idem.claim.duration", outcome("replayed")); n != 1 || secs < (held/2).Seconds() {
		t.Errorf("idem.claim.duration{replayed}: count %d sum %vs, want 1 observation of at least %v", n, secs, held/2)
	}
	if n := f.sum("idem.active_claims", store); n != 0 {
		t.Errorf("idem.active_claims = %d after both ended, want 0", n)
	}
	f.noClearText()
}

// A request whose lease runs out while it runs loses its key to a retry
// that takes it over; its server span gets idem.lease_lost and
// idem.leases.lost counts it.
func TestLeaseLoss(t *testing.T) {
	t.Parallel()
	const lease = time.Minute
	running, finish := make(chan struct{}), make(chan struct{})
	var calls sync.Mutex
	n := 0
	f := setup(t, middleware.Options{Engine: engine.Options{Lease: lease, Wait: -1}}, func(w http.ResponseWriter, r *http.Request) {
		calls.Lock()
		n++
		slow := n == 1
		calls.Unlock()
		if slow {
			close(running)
			<-finish
		}
		ok(w, r)
	})
	first := make(chan int)
	go func() { first <- f.post(`{"amount":1}`).Code }()
	<-running
	f.clock.Advance(2 * lease) // the store's clock: the first claim's lease ran out
	if rec := f.post(`{"amount":1}`); rec.Code != http.StatusCreated {
		t.Fatalf("the takeover answered %d, want 201", rec.Code)
	}
	close(finish)
	<-first

	lost := 0
	for _, name := range f.spanEvents() {
		if name == "idem.lease_lost" {
			lost++
		}
	}
	if lost != 1 {
		t.Errorf("server span events %v, want one idem.lease_lost", f.spanEvents())
	}
	if n := f.sum("idem.leases.lost", store); n != 1 {
		t.Errorf("idem.leases.lost = %d, want 1", n)
	}
	if a, o := f.sum("idem.requests", outcome("acquired")), f.sum("idem.requests", outcome("takeover")); a != 1 || o != 1 {
		t.Errorf("idem.requests{acquired} = %d and {takeover} = %d, want 1 and 1", a, o)
	}
	if n := f.sum("idem.active_claims"); n != 0 {
		t.Errorf("idem.active_claims = %d after both ended, want 0", n)
	}
	f.noClearText()
}

// A request whose claim is taken over while its work still runs learns it
// at the next renewal: the engine cancels the work and reports
// EventLeaseLost, which is an idem.lease_lost event and ends the claim.
func TestLeaseLostWhileRunning(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond // renewals every lease/3, in real time
	running := make(chan struct{})
	var calls atomic.Int32
	f := setup(t, middleware.Options{Engine: engine.Options{Lease: lease, Wait: -1}}, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(running)
			<-r.Context().Done() // until the engine cancels it
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		ok(w, r)
	})
	first := make(chan int)
	go func() { first <- f.post(`{"amount":1}`).Code }()
	<-running
	f.clock.Advance(2 * lease) // the store's clock: the first claim's lease ran out
	if rec := f.post(`{"amount":1}`); rec.Code != http.StatusCreated {
		t.Fatalf("the takeover answered %d, want 201", rec.Code)
	}
	<-first // returns once a renewal found the claim taken over

	kinds := f.events.Kinds()
	if !slices.Contains(kinds, idem.EventLeaseLost.String()) {
		t.Fatalf("events %q, want a lease lost", kinds)
	}
	lost := 0
	for _, name := range f.spanEvents() {
		if name == "idem.lease_lost" {
			lost++
		}
	}
	if lost != 1 {
		t.Errorf("server span events %v, want one idem.lease_lost", f.spanEvents())
	}
	if n := f.sum("idem.leases.lost", store); n != 1 {
		t.Errorf("idem.leases.lost = %d, want 1", n)
	}
	if n := f.sum("idem.takeovers", store); n != 1 {
		t.Errorf("idem.takeovers = %d, want 1 (the engine reports Takeover)", n)
	}
	if n := f.sum("idem.active_claims"); n != 0 {
		t.Errorf("idem.active_claims = %d after both ended, want 0", n)
	}
	f.noClearText()
}

// Events the adapters produce only under store faults (a failed claim, a
// failed completion), and from an MCP wait and takeover, constructed and
// observed directly.
func TestEventFields(t *testing.T) {
	t.Parallel()
	f := setup(t, middleware.Options{}, ok)
	scope, key := secretScope, idem.KeyFromRequestID(idem.StringRequestID(secretKey))
	unavailable := &idem.UnavailableError{Op: "claim", Err: errors.New("dial tcp 10.0.0.1: " + secretKey)}

	for _, e := range []idem.Event{
		{Kind: idem.EventReplayed, Adapter: "mcp", Scope: scope, Key: key, Duration: 300 * time.Millisecond, Waited: 250 * time.Millisecond},
		{Kind: idem.EventClaimed, Adapter: "mcp", Scope: scope, Key: key, Duration: 2 * time.Millisecond, Takeover: true},
		{Kind: idem.EventStoreError, Adapter: "mcp", Scope: scope, Key: key, Op: "complete", Err: unavailable},
		{Kind: idem.EventStoreError, Adapter: "http", Scope: scope, Key: key, Op: "claim", Err: unavailable, Duration: time.Millisecond},
		{Kind: idem.EventStoreError, Adapter: "http", Scope: scope, Key: key, Op: "claim", Err: context.Canceled},
		// A third party's adapter and a store operation this package
		// does not list.
		{Kind: idem.EventStoreError, Adapter: "grpc", Scope: scope, Key: key, Op: "forget", Err: unavailable},
	} {
		ctx, span := f.tracer.Start(t.Context(), "POST /mcp", trace.WithSpanKind(trace.SpanKindServer))
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil).WithContext(ctx)
		f.observe(r, e)
		span.End()
	}

	mcp := idemotel.AttrAdapter.String("mcp")
	claims := f.claimSpans()
	if len(claims) != 4 {
		t.Fatalf("%d idem.claim spans, want 4", len(claims))
	}
	wantAttr(t, "waited replay", claims[0].Attributes(), idemotel.AttrAdapter, "mcp")
	wantAttr(t, "waited replay", claims[0].Attributes(), idemotel.AttrWaitDuration, "0.25")
	wantAttr(t, "takeover", claims[1].Attributes(), idemotel.AttrOutcome, "takeover")
	wantAttr(t, "failed claim", claims[2].Attributes(), idemotel.AttrOutcome, "unavailable")
	wantAttr(t, "failed claim", claims[2].Attributes(), idemotel.AttrErrorType, "unavailable")
	if claims[2].Status().Code != codes.Error {
		t.Errorf("failed claim's span status %v, want Error", claims[2].Status())
	}
	wantAttr(t, "cancelled claim", claims[3].Attributes(), idemotel.AttrErrorType, "canceled")
	if claims[3].Status().Code != codes.Unset {
		t.Errorf("cancelled claim's span status %v, want Unset (the client left)", claims[3].Status())
	}
	var waits []sdktrace.ReadOnlySpan
	for _, s := range f.spans.Ended() {
		if s.Name() == "idem.wait" {
			waits = append(waits, s)
		}
	}
	if len(waits) != 1 || waits[0].Parent().SpanID() != claims[0].SpanContext().SpanID() ||
		waits[0].EndTime().Sub(waits[0].StartTime()) != 250*time.Millisecond {
		t.Errorf("want one idem.wait span of 250ms under the waited claim, got %d", len(waits))
	}

	if n, secs := f.histogramCount("idem.wait.duration", mcp, outcome("replayed")); n != 1 || secs != 0.25 {
		t.Errorf("idem.wait.duration{mcp, replayed}: count %d sum %v, want 1 and 0.25", n, secs)
	}
	if n := f.sum("idem.takeovers", mcp); n != 1 {
		t.Errorf("idem.takeovers{mcp} = %d, want 1", n)
	}
	if n := f.sum("idem.requests", idemotel.AttrAdapter.String("http"), outcome("unavailable")); n != 1 {
		t.Errorf("idem.requests{http, unavailable} = %d, want 1 (a cancelled claim is not the store's fault)", n)
	}
	if n := f.sum("idem.store.errors", idemotel.AttrStoreOperation.String("complete")); n != 1 {
		t.Errorf("idem.store.errors{complete} = %d, want 1", n)
	}
	if n := f.sum("idem.store.errors", idemotel.AttrStoreOperation.String("claim")); n != 1 {
		t.Errorf("idem.store.errors{claim} = %d, want 1", n)
	}
	if n := f.sum("idem.store.errors", idemotel.AttrAdapter.String("grpc"), idemotel.AttrStoreOperation.String("forget"), store); n != 1 {
		t.Errorf("idem.store.errors{grpc, forget, memory} = %d, want 1", n)
	}
	// The takeover's claim ended with the failed completion.
	if n := f.sum("idem.active_claims", mcp); n != 0 {
		t.Errorf("idem.active_claims{mcp} = %d, want 0", n)
	}
	f.noClearText()
}

// An end reported twice (the renewal and the completion both see the lost
// lease) moves idem.active_claims once.
func TestActiveClaimsEndOnce(t *testing.T) {
	t.Parallel()
	f := setup(t, middleware.Options{}, ok)
	key := idem.KeyFromRequestID(idem.StringRequestID(secretKey))
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	for _, e := range []idem.Event{
		{Kind: idem.EventClaimed, Adapter: "http", Scope: "a", Key: key},
		{Kind: idem.EventClaimed, Adapter: "http", Scope: "b", Key: key},
		{Kind: idem.EventStale, Adapter: "http", Scope: "a", Key: key},
		{Kind: idem.EventStale, Adapter: "http", Scope: "a", Key: key},
	} {
		f.observe(r, e)
	}
	if n := f.sum("idem.active_claims"); n != 1 {
		t.Errorf("idem.active_claims = %d, want 1 (b's claim)", n)
	}
	if len(f.spans.Ended()) != 0 {
		t.Errorf("%d spans recorded for a request without a span, want none", len(f.spans.Ended()))
	}
}

func TestReplayCacheHits(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	var hits atomic.Int64
	if _, err := idemotel.New(idemotel.Options{MeterProvider: mp, Store: "postgres", ReplayCacheHits: hits.Load}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, reader: reader}
	hits.Store(7)
	if n := f.sum("idem.replay_cache.hits", idemotel.AttrStore.String("postgres")); n != 7 {
		t.Errorf("idem.replay_cache.hits = %d, want 7", n)
	}
	hits.Store(9)
	if n := f.sum("idem.replay_cache.hits"); n != 9 {
		t.Errorf("idem.replay_cache.hits = %d after two more hits, want 9", n)
	}
}

func TestSwept(t *testing.T) {
	t.Parallel()
	f := setup(t, middleware.Options{}, ok)
	f.obs.Swept(t.Context(), idem.SweepStats{Abandoned: 2, Expired: 5})
	f.obs.Swept(t.Context(), idem.SweepStats{Expired: 1})
	if n := f.sum("idem.sweeps", store); n != 2 {
		t.Errorf("idem.sweeps = %d, want 2", n)
	}
	if n := f.sum("idem.sweep.entries", idemotel.AttrSweepKind.String("abandoned")); n != 2 {
		t.Errorf("idem.sweep.entries{abandoned} = %d, want 2", n)
	}
	if n := f.sum("idem.sweep.entries", idemotel.AttrSweepKind.String("expired")); n != 6 {
		t.Errorf("idem.sweep.entries{expired} = %d, want 6", n)
	}
}

// BenchmarkObserve is the cost of one event on the request path: a claim
// (span and metrics) and its completion (span event and metrics), with the
// SDK recording and with OpenTelemetry's no-op providers.
func BenchmarkObserve(b *testing.B) {
	key := idem.KeyFromRequestID(idem.StringRequestID(secretKey))
	claimed := idem.Event{Kind: idem.EventClaimed, Adapter: "http", Scope: secretScope, Key: key, Duration: time.Millisecond}
	completed := idem.Event{Kind: idem.EventCompleted, Adapter: "http", Scope: secretScope, Key: key, Status: 201, Duration: time.Millisecond}
	for _, bc := range []struct {
		name string
		opts func() idemotel.Options
	}{
		{"sdk", func() idemotel.Options {
			return idemotel.Options{
				// Recording, with no processor to keep the spans: the
				// benchmark measures idemotel and the SDK, not a growing
				// slice of ended spans.
				TracerProvider: sdktrace.NewTracerProvider(),
				MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
				Store:          "postgres",
			}
		}},
		{"noop", func() idemotel.Options {
			return idemotel.Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := bc.opts()
			obs, err := idemotel.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			ctx, span := opts.TracerProvider.Tracer("bench").Start(b.Context(), "POST /invoices")
			defer span.End()
			r := httptest.NewRequest(http.MethodPost, "/invoices", nil).WithContext(ctx)
			b.ReportAllocs()
			for b.Loop() {
				obs.Observe(r, claimed)
				obs.Observe(r, completed)
			}
		})
	}
}

// A call made again under a new key (mcphttp's NewKeyGuard,
// EventKeyRotated) is counted and marked on the request's span.
func TestKeyRotated(t *testing.T) {
	t.Parallel()
	f := setup(t, middleware.Options{}, ok)
	ctx, span := f.tracer.Start(t.Context(), "POST /mcp", trace.WithSpanKind(trace.SpanKindServer))
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil).WithContext(ctx)
	f.observe(r, idem.Event{Kind: idem.EventKeyRotated, Adapter: "mcp"})
	span.End()
	if n := f.sum("idem.keys.rotated", idemotel.AttrAdapter.String("mcp")); n != 1 {
		t.Errorf("idem.keys.rotated{mcp} = %d, want 1", n)
	}
	var found bool
	for _, s := range f.spans.Ended() {
		for _, ev := range s.Events() {
			found = found || ev.Name == "idem.key_rotated"
		}
	}
	if !found {
		t.Error("no idem.key_rotated event on the request's span")
	}
}

// A request the protected handler itself refused before a replay (mcphttp's
// probe, EventRejected) is counted and marked on the request's span.
func TestRejected(t *testing.T) {
	t.Parallel()
	f := setup(t, middleware.Options{}, ok)
	ctx, span := f.tracer.Start(t.Context(), "POST /mcp", trace.WithSpanKind(trace.SpanKindServer))
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil).WithContext(ctx)
	f.observe(r, idem.Event{Kind: idem.EventRejected, Adapter: "mcp", Status: http.StatusBadRequest})
	span.End()

	if n := f.sum("idem.rejections", idemotel.AttrAdapter.String("mcp")); n != 1 {
		t.Errorf("idem.rejections{mcp} = %d, want 1", n)
	}
	var found bool
	for _, s := range f.spans.Ended() {
		for _, ev := range s.Events() {
			if ev.Name == "idem.rejected" {
				found = true
				wantAttr(t, "rejection", ev.Attributes, idemotel.AttrResultStatus, "400")
			}
		}
	}
	if !found {
		t.Error("no idem.rejected event on the request's span")
	}
	f.noClearText()
}

// Observer.Swept is an idem.Sweeper's OnSweep as it is (a compile-time
// assertion: the package doc says so).
var _ = func(o *idemotel.Observer) idem.Sweeper { return idem.Sweeper{OnSweep: o.Swept} }

// A call whose SSE stream ends without its response is left to its lease
// (mcphttp): the claim's end is reported when the work ends, so
// idem.active_claims comes down and the Observer forgets the claim.
func TestLeftClaimEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
	})
	h := f.serverSpan(mcphttp.New(memstore.New(memstore.Options{}), mcphttp.Options{Observer: f.observe})(inner))
	for i := range 3 {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow","arguments":{},"_meta":{"idempotencyKey":"left-%d"}}}`, i, i)
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if n := f.sum("idem.active_claims"); n != 0 {
		t.Errorf("idem.active_claims = %d after three calls left to their leases, want 0; events %v", n, f.events.All())
	}
	if n, _ := f.histogramCount("idem.execution.duration", idemotel.AttrExecutionOutcome.String("left")); n != 3 {
		t.Errorf("idem.execution.duration{left} count = %d, want 3", n)
	}
}

// A request the adapter refused, and one it let run unprotected, are
// counted by reason and marked on the request's span; the middleware
// reports them.
func TestRefusedAndUnprotected(t *testing.T) {
	t.Parallel()
	f := setup(t, middleware.Options{}, ok)
	ctx, span := f.tracer.Start(t.Context(), "POST /orders", trace.WithSpanKind(trace.SpanKindServer))
	f.handler.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/orders", nil).WithContext(ctx)) // no key
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil).WithContext(ctx)
	f.observe(r, idem.Event{Kind: idem.EventUnprotected, Adapter: "mcp", Reason: idem.UnprotectedNoKey})
	span.End()
	if n := f.sum("idem.refusals", idemotel.AttrAdapter.String("http"), idemotel.AttrReason.String(idem.RefusedMissingKey)); n != 1 {
		t.Errorf("idem.refusals{http, missing_key} = %d, want 1", n)
	}
	if n := f.sum("idem.unprotected", idemotel.AttrAdapter.String("mcp"), idemotel.AttrReason.String(idem.UnprotectedNoKey)); n != 1 {
		t.Errorf("idem.unprotected{mcp, no_key} = %d, want 1", n)
	}
	events := map[string]bool{}
	for _, s := range f.spans.Ended() {
		for _, ev := range s.Events() {
			events[ev.Name] = true
		}
	}
	if !events["idem.refused"] || !events["idem.unprotected"] {
		t.Errorf("span events %v, want idem.refused and idem.unprotected", events)
	}
}
