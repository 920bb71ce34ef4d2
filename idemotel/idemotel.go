package idemotel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
)

// ScopeName is the instrumentation scope of idemotel's tracer and meter.
const ScopeName = "github.com/idemkit/idem/idemotel"

// The names the idem adapters report in Event.Adapter (middleware.AdapterName
// and mcphttp.AdapterName), whose series are created at zero. Written out
// rather than imported: mcphttp is a module of its own (the MCP SDK), and
// this package imports no adapter.
const (
	adapterHTTP = "http"
	adapterMCP  = "mcp"
)

// Outcomes of a claim, the values of the idem.outcome attribute.
const (
	OutcomeAcquired    = "acquired"    // the request claimed its key; the work runs
	OutcomeTakeover    = "takeover"    // acquired from an owner whose lease ran out
	OutcomeReplayed    = "replayed"    // the recorded result was replayed
	OutcomeInFlight    = "in_flight"   // a duplicate still ran after the wait; told to retry
	OutcomeMismatch    = "mismatch"    // the key was used for a different request
	OutcomeUnavailable = "unavailable" // the store could not be asked
)

// Attribute keys. None carries a key or a scope in clear.
const (
	AttrOutcome           = attribute.Key("idem.outcome")
	AttrAdapter           = attribute.Key("idem.adapter")
	AttrStore             = attribute.Key("idem.store")
	AttrKeyDigest         = attribute.Key("idem.key.digest")
	AttrWaitDuration      = attribute.Key("idem.wait.duration")
	AttrExecutionDuration = attribute.Key("idem.execution.duration")
	AttrExecutionOutcome  = attribute.Key("idem.execution.outcome")
	AttrResultStatus      = attribute.Key("idem.result.status_code")
	AttrStoreOperation    = attribute.Key("idem.store.operation")
	AttrSweepKind         = attribute.Key("idem.sweep.kind")
	AttrReason            = attribute.Key("idem.reason") // a refusal's or an unprotected request's (idem.Refused*, idem.Unprotected*)
	AttrErrorType         = attribute.Key("error.type")
)

// durationBuckets are the histogram boundaries in seconds: a claim answered
// from memory takes tens of microseconds, one through PostgreSQL a
// millisecond, a wait up to the adapters' Wait (seconds).
var durationBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Options configures [New].
type Options struct {
	// TracerProvider makes the tracer. Nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the meter. Nil means otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Store names the store in the idem.store attribute ("postgres",
	// "memory"). Empty means the attribute is omitted.
	Store string
	// ReplayCacheHits, read at each collection, is how many claims a replay
	// cache has answered so far: pass (*pgstore.Store).ReplayCacheHits. It
	// must be safe for concurrent use and never decrease. Nil means
	// idem.replay_cache.hits is not reported.
	ReplayCacheHits func() int64
}

// Observer turns [idem.Event]s into spans and metrics. Its Observe method
// is the Observer of the middleware and of mcphttp. It is safe for
// concurrent use.
type Observer struct {
	tracer trace.Tracer
	store  string

	requests       metric.Int64Counter
	claimTime      metric.Float64Histogram
	waitTime       metric.Float64Histogram
	executionTime  metric.Float64Histogram
	activeClaims   metric.Int64UpDownCounter
	takeovers      metric.Int64Counter
	leasesLost     metric.Int64Counter
	rejections     metric.Int64Counter
	refusals       metric.Int64Counter
	unprotected    metric.Int64Counter
	keysRotated    metric.Int64Counter
	storeErrors    metric.Int64Counter
	sweeps         metric.Int64Counter
	sweptEntries   metric.Int64Counter
	active         activeSet
	points         map[string]*points       // by adapter: "", "http", "mcp"
	sweepAbandoned metric.MeasurementOption // precomputed attribute sets
	sweepExpired   metric.MeasurementOption
	storeOnly      metric.MeasurementOption
}

// New makes an Observer. It fails only if the meter refuses an instrument.
func New(opts Options) (*Observer, error) {
	tp, mp := opts.TracerProvider, opts.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	o := &Observer{tracer: tp.Tracer(ScopeName), store: opts.Store}
	o.active.claims = make(map[string]int)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return h
	}
	o.requests = counter("idem.requests", "{request}", "Requests carrying an idempotency key, by outcome.")
	o.claimTime = histogram("idem.claim.duration", "Time to claim a key, waiting for an in-flight duplicate included, by outcome.")
	o.waitTime = histogram("idem.wait.duration", "Time a request waited for an in-flight duplicate to finish, by outcome.")
	o.executionTime = histogram("idem.execution.duration", "Time the protected work ran under its claim, by whether its result was recorded.")
	o.takeovers = counter("idem.takeovers", "{claim}", "Claims taken over from an owner whose lease ran out.")
	o.leasesLost = counter("idem.leases.lost", "{claim}", "Claims lost while the work ran (taken over or forgotten); their results were not recorded.")
	o.rejections = counter("idem.rejections", "{request}", "Requests the protected handler's own checks refused before the adapter replayed (mcphttp's pre-replay probe).")
	o.refusals = counter("idem.refusals", "{request}", "Requests the adapter answered itself because they cannot be deduplicated as sent (missing or invalid key, body too large, ...), by idem.reason.")
	o.unprotected = counter("idem.unprotected", "{request}", "Requests that ran without deduplication (no key with KeyOptional, FailOpen), by idem.reason.")
	o.keysRotated = counter("idem.keys.rotated", "{request}", "Calls made again by the same caller under a new idempotency key (mcphttp's NewKeyGuard).")
	o.storeErrors = counter("idem.store.errors", "{error}", "Store calls that failed, by operation.")
	o.sweeps = counter("idem.sweeps", "{sweep}", "Sweeper passes.")
	o.sweptEntries = counter("idem.sweep.entries", "{entry}", "Entries removed by the sweeper: abandoned claims and expired results.")
	var err error
	o.activeClaims, err = meter.Int64UpDownCounter("idem.active_claims", metric.WithUnit("{claim}"),
		metric.WithDescription("Claims taken by this process whose end has not been reported yet."))
	errs = append(errs, err)
	o.points = map[string]*points{}
	for _, adapter := range []string{"", adapterHTTP, adapterMCP} {
		o.points[adapter] = newPoints(adapter, o.store)
	}
	storeOnly := o.points[""]
	if hits := opts.ReplayCacheHits; hits != nil {
		attrs := storeOnly.common
		_, err = meter.Int64ObservableCounter("idem.replay_cache.hits", metric.WithUnit("{hit}"),
			metric.WithDescription("Claims answered from the store's in-process replay cache, without a round trip."),
			metric.WithInt64Callback(func(_ context.Context, obs metric.Int64Observer) error {
				obs.Observe(hits(), attrs)
				return nil
			}))
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("idemotel: %w", err)
	}
	o.storeOnly = storeOnly.common
	o.sweepAbandoned = storeOnly.get(nil, AttrSweepKind, "abandoned")
	o.sweepExpired = storeOnly.get(nil, AttrSweepKind, "expired")
	return o, nil
}

// Observe records e: pass it as the Observer of middleware.Options and
// mcphttp.Options. r is the request the event belongs to; its context holds
// the span that is annotated.
func (o *Observer) Observe(r *http.Request, e idem.Event) {
	ctx := r.Context()
	span := trace.SpanFromContext(ctx)
	tracing := span.IsRecording()

	p := o.points[e.Adapter]
	if p == nil { // an adapter this package does not know: correct, slower
		p = newPoints(e.Adapter, o.store)
	}
	common := p.attrs
	digest := idem.KeyDigest(e.Scope, e.Key)
	digestAttr := AttrKeyDigest.String(digest)
	// A measurement context that cannot be cancelled: the request's may
	// already be, and a cancelled context must not drop a point.
	mctx := context.WithoutCancel(ctx)

	switch e.Kind {
	case idem.EventClaimed, idem.EventReplayed, idem.EventInFlight, idem.EventMismatch:
		outcome := claimOutcome(e)
		o.claimed(mctx, e, outcome, p)
		if e.Kind == idem.EventClaimed {
			o.active.add(e.Adapter, digest)
			o.activeClaims.Add(mctx, 1, p.common)
		}
		if tracing {
			o.claimSpan(ctx, e, outcome, append(common, digestAttr), nil)
		}
		return
	case idem.EventStoreError:
		canceled := errors.Is(e.Err, context.Canceled)
		if e.Op == "claim" {
			if !canceled {
				o.claimed(mctx, e, OutcomeUnavailable, p)
			}
			if tracing {
				o.claimSpan(ctx, e, OutcomeUnavailable, append(common, digestAttr), e.Err)
			}
			return
		}
		if !canceled {
			o.storeErrors.Add(mctx, 1, p.get(p.op, AttrStoreOperation, e.Op))
		}
		if tracing {
			span.AddEvent("idem.store_error", trace.WithAttributes(append(common, digestAttr,
				AttrStoreOperation.String(e.Op), AttrErrorType.String(errorType(e.Err)))...))
		}
	case idem.EventCompleted:
		o.executionTime.Record(mctx, e.Duration.Seconds(), p.execution[executionCompleted])
		if tracing {
			span.AddEvent("idem.complete", trace.WithAttributes(append(common, digestAttr,
				AttrResultStatus.Int(e.Status), AttrExecutionDuration.Float64(e.Duration.Seconds()))...))
		}
	case idem.EventReleased:
		o.executionTime.Record(mctx, e.Duration.Seconds(), p.execution[executionReleased])
		if tracing {
			span.AddEvent("idem.release", trace.WithAttributes(append(common, digestAttr,
				AttrExecutionDuration.Float64(e.Duration.Seconds()))...))
		}
	case idem.EventLeft:
		o.executionTime.Record(mctx, e.Duration.Seconds(), p.execution[executionLeft])
		if tracing {
			span.AddEvent("idem.left", trace.WithAttributes(append(common, digestAttr,
				AttrExecutionDuration.Float64(e.Duration.Seconds()))...))
		}
	case idem.EventRejected:
		o.rejections.Add(mctx, 1, p.common)
		if tracing {
			span.AddEvent("idem.rejected", trace.WithAttributes(append(common, AttrResultStatus.Int(e.Status))...))
		}
		return
	case idem.EventRefused, idem.EventUnprotected:
		counter, name := o.refusals, "idem.refused"
		if e.Kind == idem.EventUnprotected {
			counter, name = o.unprotected, "idem.unprotected"
		}
		reason := AttrReason.String(e.Reason)
		counter.Add(mctx, 1, metric.WithAttributes(append(common, reason)...))
		if tracing {
			attrs := append(common, reason)
			if e.Status != 0 {
				attrs = append(attrs, AttrResultStatus.Int(e.Status))
			}
			if !e.Key.IsZero() {
				attrs = append(attrs, digestAttr)
			}
			span.AddEvent(name, trace.WithAttributes(attrs...))
		}
		return
	case idem.EventKeyRotated:
		o.keysRotated.Add(mctx, 1, p.common)
		if tracing {
			span.AddEvent("idem.key_rotated", trace.WithAttributes(append(common, digestAttr)...))
		}
		return
	case idem.EventStale, idem.EventLeaseLost:
		o.leasesLost.Add(mctx, 1, p.common)
		if tracing {
			span.AddEvent("idem.lease_lost", trace.WithAttributes(append(common, digestAttr)...))
		}
	}
	if ends(e) && o.active.remove(e.Adapter, digest) {
		o.activeClaims.Add(mctx, -1, p.common)
	}
}

// claimed records the metrics of a claim's outcome.
func (o *Observer) claimed(ctx context.Context, e idem.Event, outcome string, p *points) {
	attrs := p.outcome[outcome]
	o.requests.Add(ctx, 1, attrs)
	o.claimTime.Record(ctx, e.Duration.Seconds(), attrs)
	if e.Waited > 0 {
		o.waitTime.Record(ctx, e.Waited.Seconds(), attrs)
	}
	if outcome == OutcomeTakeover {
		o.takeovers.Add(ctx, 1, p.common)
	}
	if outcome == OutcomeUnavailable {
		o.storeErrors.Add(ctx, 1, p.op["claim"])
	}
}

// claimSpan adds the idem.claim child span, backdated by the claim's
// duration, and its idem.wait child when the claim waited.
func (o *Observer) claimSpan(ctx context.Context, e idem.Event, outcome string, attrs []attribute.KeyValue, err error) {
	end := time.Now()
	attrs = append(attrs, AttrOutcome.String(outcome))
	if e.Waited > 0 {
		attrs = append(attrs, AttrWaitDuration.Float64(e.Waited.Seconds()))
	}
	ctx, span := o.tracer.Start(ctx, "idem.claim", trace.WithTimestamp(end.Add(-e.Duration)),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if e.Waited > 0 {
		_, wait := o.tracer.Start(ctx, "idem.wait", trace.WithTimestamp(end.Add(-e.Waited)),
			trace.WithSpanKind(trace.SpanKindInternal))
		wait.End(trace.WithTimestamp(end))
	}
	if err != nil {
		span.SetAttributes(AttrErrorType.String(errorType(err)))
		if !errors.Is(err, context.Canceled) { // the client left: not an error of ours
			span.SetStatus(codes.Error, "idem: store unavailable")
		}
	}
	span.End(trace.WithTimestamp(end))
}

// Swept records a sweeper pass that removed st.
func (o *Observer) Swept(ctx context.Context, st idem.SweepStats) {
	ctx = context.WithoutCancel(ctx)
	o.sweeps.Add(ctx, 1, o.storeOnly)
	o.sweptEntries.Add(ctx, int64(st.Abandoned), o.sweepAbandoned)
	o.sweptEntries.Add(ctx, int64(st.Expired), o.sweepExpired)
}

func claimOutcome(e idem.Event) string {
	switch e.Kind {
	case idem.EventClaimed:
		if e.Takeover {
			return OutcomeTakeover
		}
		return OutcomeAcquired
	case idem.EventReplayed:
		return OutcomeReplayed
	case idem.EventInFlight:
		return OutcomeInFlight
	case idem.EventMismatch:
		return OutcomeMismatch
	}
	return OutcomeUnavailable
}

// ends reports whether e reports the end of a claim this process held.
func ends(e idem.Event) bool {
	switch e.Kind {
	case idem.EventCompleted, idem.EventReleased, idem.EventLeft, idem.EventStale, idem.EventLeaseLost:
		return true
	case idem.EventStoreError:
		return e.Op == "complete" || e.Op == "release"
	}
	return false
}

// errorType names an error for error.type without its message, which could
// carry client data.
func errorType(err error) string {
	var unavailable *idem.UnavailableError
	switch {
	case err == nil:
		return "_OTHER"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, idem.ErrStaleClaim):
		return "stale_claim"
	case errors.Is(err, idem.ErrCapacity):
		return "capacity"
	case errors.As(err, &unavailable), errors.Is(err, idem.ErrUnavailable):
		return "unavailable"
	}
	return fmt.Sprintf("%T", err)
}

// activeSet counts, per adapter and key, the claims this process took and
// has not seen end, so that idem.active_claims moves by exactly one per
// claim: an end reported twice (a lost lease seen by the renewal, then by
// the completion) or for a claim taken before the Observer existed does not
// drive the count below what it added.
type activeSet struct {
	mu     sync.Mutex
	claims map[string]int // adapter + NUL + key digest -> claims held
}

func (a *activeSet) add(adapter, digest string) {
	a.mu.Lock()
	a.claims[adapter+"\x00"+digest]++
	a.mu.Unlock()
}

// remove forgets one claim of (adapter, digest) and reports whether there
// was one.
func (a *activeSet) remove(adapter, digest string) bool {
	id := adapter + "\x00" + digest
	a.mu.Lock()
	defer a.mu.Unlock()
	switch n := a.claims[id]; {
	case n > 1:
		a.claims[id] = n - 1
	case n == 1:
		delete(a.claims, id)
	default:
		return false
	}
	return true
}

// Values of idem.execution.outcome.
const (
	executionCompleted = "completed"
	executionReleased  = "released"
	executionLeft      = "left" // to its lease: EventLeft
)

// points holds the metric attributes of one adapter's events, made once:
// building an attribute set per event would be most of an event's cost.
type points struct {
	attrs     []attribute.KeyValue // adapter (if any) and store (if any); full, so appends copy
	common    metric.MeasurementOption
	outcome   map[string]metric.MeasurementOption // by idem.outcome
	execution map[string]metric.MeasurementOption // by idem.execution.outcome
	op        map[string]metric.MeasurementOption // by idem.store.operation
}

func newPoints(adapter, store string) *points {
	var attrs []attribute.KeyValue
	if adapter != "" {
		attrs = append(attrs, AttrAdapter.String(adapter))
	}
	if store != "" {
		attrs = append(attrs, AttrStore.String(store))
	}
	attrs = attrs[:len(attrs):len(attrs)]
	p := &points{attrs: attrs, common: metric.WithAttributeSet(attribute.NewSet(attrs...))}
	set := func(key attribute.Key, values ...string) map[string]metric.MeasurementOption {
		m := make(map[string]metric.MeasurementOption, len(values))
		for _, v := range values {
			m[v] = metric.WithAttributeSet(attribute.NewSet(append(attrs, key.String(v))...))
		}
		return m
	}
	p.outcome = set(AttrOutcome, OutcomeAcquired, OutcomeTakeover, OutcomeReplayed, OutcomeInFlight, OutcomeMismatch, OutcomeUnavailable)
	p.execution = set(AttrExecutionOutcome, executionCompleted, executionReleased, executionLeft)
	p.op = set(AttrStoreOperation, "claim", "renew", "complete", "release")
	return p
}

// get returns m's option for value, or makes one for a value m lacks (a
// store operation added after this package).
func (p *points) get(m map[string]metric.MeasurementOption, key attribute.Key, value string) metric.MeasurementOption {
	if opt, ok := m[value]; ok {
		return opt
	}
	return metric.WithAttributes(append(p.attrs, key.String(value))...)
}
