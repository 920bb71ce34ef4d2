package mcphttp

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/adapter"
)

// AdapterName is the wrapper's name in the [idem.Event]s it reports
// (Event.Adapter), and so the adapter label of idemprom's and idemotel's
// metrics.
const AdapterName = "mcp"

type wrapper struct {
	next       http.Handler
	eng        *engine.Engine
	methods    map[string]bool
	wait       time.Duration // Options.Engine.Wait, the default applied; zero: no wait
	maxInspect int64
	maxRecord  int
	scope      *adapter.Scoper
	log        *slog.Logger
	observer   func(*http.Request, idem.Event)
	// stateless is Options.Stateless.
	stateless bool
	// cancelWithClient is Options.Engine.CancelWithClient.
	cancelWithClient bool
	// sessions holds the calls running on each session, for a DELETE of
	// the session to wait for (see sessionCalls).
	sessions sessionCalls
	// extension is the settings object of ExtensionID, advertised in the
	// answers to initialize and server/discover (see advertise).
	extension json.RawMessage
	// newKeys is Options.NewKeyGuard at work; nil without one.
	newKeys *keyMemory
	// inTx is Options.InTransactionTools.
	inTx func(tool string) bool
}

// New returns middleware that deduplicates MCP calls (by default
// tools/call) on the Streamable HTTP transport in front of any MCP handler,
// with store as the source of truth. See the package documentation for
// what it does and why. It panics if store is nil or opts is invalid.
func New(store idem.Store, opts Options) func(http.Handler) http.Handler {
	if store == nil {
		panic("mcphttp: nil store")
	}
	// Misconfiguration panics here, at construction, never per request, as
	// net/http's constructors do (and package middleware's New).
	opts.validate()
	if _, ok := store.(idem.TxStore); opts.InTransactionTools != nil && !ok {
		panic(fmt.Sprintf("mcphttp: Options.InTransactionTools with a %T, which cannot claim in a transaction (not an idem.TxStore)", store))
	}
	// A call cut off by its client is recorded if the recorder saw its
	// whole response and records it (recorder.verdict); released otherwise.
	eopts := opts.Engine.ForAdapter(AdapterName, DefaultWait)
	methods := map[string]bool{}
	if opts.Methods == nil {
		methods["tools/call"] = true
	}
	for _, m := range opts.Methods {
		methods[m] = true
	}
	eng := engine.New(store, eopts)
	scope := adapter.NewScoper("mcphttp", opts.scoping(), opts.Engine.Logger)
	return func(next http.Handler) http.Handler {
		return &wrapper{
			next: next, eng: eng, methods: methods, wait: eopts.Wait,
			maxInspect: cmp.Or(opts.MaxBodyBytes, DefaultMaxBodyBytes),
			maxRecord:  cmp.Or(opts.MaxRecordBytes, DefaultMaxRecordBytes),
			scope:      scope, log: eopts.Logger, observer: opts.Observer,
			stateless: opts.Stateless, cancelWithClient: eopts.CancelWithClient,
			extension: extensionSettings(methods, store),
			newKeys:   newKeyMemory(opts.NewKeyGuard),
			inTx:      opts.InTransactionTools,
		}
	}
}

func (m *wrapper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(DerivedKeyHeader) != "" || r.Header.Get(txHeader) != "" {
		r = r.Clone(r.Context())
		r.Header.Del(DerivedKeyHeader)
		r.Header.Del(txHeader) // only the wrapper names a call's transaction
	}
	if r.Method == http.MethodDelete {
		m.holdDelete(r)
	}
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody || m.routedAround(r) {
		m.next.ServeHTTP(w, r)
		return
	}
	body, whole, err := readPrefix(r.Body, m.maxInspect)
	// Give the inner handler the body exactly as it came, read or not.
	r.Body = &rereadBody{Reader: io.MultiReader(bytes.NewReader(body), r.Body), Closer: r.Body}
	if err != nil || !whole {
		m.next.ServeHTTP(w, r)
		return
	}
	c, ok := parseCall(body, m.methods)
	if !ok {
		if method, id, ok := advertised(body); ok {
			m.advertise(w, r, method, id)
			return
		}
	}
	if !ok || !m.headersAgree(r, c) {
		m.next.ServeHTTP(w, r)
		return
	}
	if c.refusal != "" {
		m.refuseInvalid(w, r, c)
		return
	}
	m.serveCall(w, r, c)
}

// refuseInvalid answers a call the wrapper will not run (see call.refusal)
// with HTTP 400 and [CodeInvalidRequest], before the inner handler sees it.
func (m *wrapper) refuseInvalid(w http.ResponseWriter, r *http.Request, c call) {
	m.observe(r, idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedInvalidRequest, Status: http.StatusBadRequest, Adapter: AdapterName})
	msg := "a deduplicated call's id must be a string or an integer from -(2^53-1) to 2^53-1"
	if c.refusal == ReasonDuplicateMember {
		msg = "a deduplicated call must not repeat a member name in its envelope, params or _meta"
	}
	b := errorResponse(c.rawID, rpcError{Code: CodeInvalidRequest, Message: msg, Data: errorData{Reason: c.refusal}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(b)
}

// headersAgree reports whether the optional Mcp-Method and Mcp-Name headers
// (newer protocol revisions) name the body's method and tool. When they do
// not, the inner handler rejects the request, and the wrapper leaves that to
// it rather than answer from the store.
func (m *wrapper) headersAgree(r *http.Request, c call) bool {
	if modern(r, c) && !standardHeadersPresent(r, c) {
		return false
	}
	if v := r.Header.Get("Mcp-Method"); v != "" && v != c.method {
		return false
	}
	if v := r.Header.Get("Mcp-Name"); v != "" && v != c.name {
		return false
	}
	return true
}

func (m *wrapper) serveCall(w http.ResponseWriter, r *http.Request, c call) {
	req, forward, source, ok, keyErr := m.identify(r, c)
	if !ok {
		m.observe(r, idem.Event{Kind: idem.EventUnprotected, Reason: idem.UnprotectedNoKey, Adapter: AdapterName})
		m.next.ServeHTTP(w, r)
		return
	}
	if keyErr != nil {
		body, reason := m.refusal(r, c, source, keyErr)
		if status, answered := m.answer(w, r, c, body, false); answered {
			m.log.InfoContext(r.Context(), "mcphttp refused a call", "reason", reason, "adapter", AdapterName)
			m.observe(r, idem.Event{Kind: idem.EventRefused, Reason: reason, Status: status, Adapter: AdapterName})
		}
		return
	}
	if source != "" {
		var refusal []byte
		if req, forward, refusal = m.guardKey(r, c, req, forward); refusal != nil {
			m.answer(w, r, c, refusal, false)
			return
		}
	}
	ctx := r.Context()
	ereq := &engine.Request{Claim: req, InTransaction: m.inTransaction(c)}
	if m.observer != nil {
		ereq.Observe = func(e idem.Event) { m.observer(r, e) }
	}
	d := m.eng.TryClaim(ctx, ereq)
	switch d.Outcome {
	case engine.Run:
		m.execute(w, r, c, ereq, d, forward, nil)
		return
	case engine.RequestEnded:
		m.answerCancelled(w, r, c, nil)
		return
	}
	// Anything but a fresh claim is answered by the wrapper, and only after
	// the inner handler has accepted the request: see "Order of checks: the probe" in docs/design.md.
	probe, accepted := m.probe(r, c)
	if !accepted {
		probe.writeTo(w)
		return
	}
	if d.Outcome == engine.InFlight && m.wait > 0 {
		switch d = m.eng.Claim(ctx, ereq); d.Outcome {
		case engine.Run:
			m.execute(w, r, c, ereq, d, forward, probe)
			return
		case engine.RequestEnded:
			m.answerCancelled(w, r, c, probe)
			return
		}
	} else {
		m.eng.Report(ctx, ereq, d)
	}
	body, replayed := m.replayBody(c, req, d)
	m.answer(w, r, c, body, replayed, probe)
}

// observe reports e to Options.Observer, if any.
func (m *wrapper) observe(r *http.Request, e idem.Event) {
	if m.observer != nil {
		m.observer(r, e)
	}
}

// readPrefix reads up to limit bytes of body. whole reports that body ended
// within them.
func readPrefix(body io.Reader, limit int64) (prefix []byte, whole bool, err error) {
	prefix, err = io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return prefix, false, err
	}
	if int64(len(prefix)) > limit {
		return prefix, false, nil
	}
	return prefix, true, nil
}

// rereadBody re-provides a request body the wrapper read part of.
type rereadBody struct {
	io.Reader
	io.Closer
}
