package mcphttp

import (
	"container/list"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// Defaults of [NewKeyGuard].
const (
	// DefaultNewKeyWindow is NewKeyGuard.Window when zero.
	DefaultNewKeyWindow = 5 * time.Minute
	// DefaultNewKeyCalls is NewKeyGuard.MaxCalls when zero.
	DefaultNewKeyCalls = 10000
)

// TypeKeyRotated is data.type of the [CodeInvalidParams] error with which
// a [NewKeyGuard] that refuses ([NewKeyRefuse]) answers a call sent again
// under a new key; data.reason is the same.
const TypeKeyRotated = "idempotency_key_rotated"

// NewKeyAction is what a [NewKeyGuard] does with a call that looks like a
// retry under a new key.
type NewKeyAction int

const (
	// NewKeyReport reports it ([idem.EventKeyRotated] to Options.Observer,
	// and a log line) and runs it under its own key, as without a guard.
	NewKeyReport NewKeyAction = iota
	// NewKeyRefuse reports it and refuses it with [CodeInvalidParams],
	// data.type [TypeKeyRotated]: the tool does not run. A client that
	// means a second, identical call sends it once the window has passed,
	// or with other arguments.
	NewKeyRefuse
	// NewKeyAsRetry reports it and treats it as a retry of the call under
	// the first key: it gets that call's result (a replay, or a wait for
	// it while it runs), and forwards the first key upstream.
	NewKeyAsRetry
)

// NewKeyGuard notices an agent that mints a new idempotency key for every
// retry, which defeats idempotency keys entirely: a client built on a model
// may make the key up afresh each time it decides to call a tool. It
// remembers, per caller (the call's scope: its identity and
// _meta.sessionId), the key each tool and canonical arguments were last
// called with, and a call with the same caller, tool and arguments but
// another client-chosen key within Window is reported and handled as Action
// says. Calls without a client-chosen key (a derived key) are not looked at.
//
// The trade-off: a caller who really wants two identical calls (two equal
// invoices for one customer) in the window looks exactly like such an agent.
// With NewKeyRefuse the second is refused, with NewKeyAsRetry it gets the
// first one's result; only NewKeyReport never changes an answer. So the
// guard is off unless configured, and Report is the default action.
//
// The memory is per process (a retry that reaches another instance is not
// noticed) and bounded by MaxCalls, the oldest forgotten first. The zero
// NewKeyGuard is ready to use: report, a 5 minute window, 10,000 calls.
type NewKeyGuard struct {
	// Window is how long a call's key is remembered after its last use.
	// Zero means [DefaultNewKeyWindow]; negative panics.
	Window time.Duration
	// Action is what happens to a call under a new key. The zero value is
	// NewKeyReport.
	Action NewKeyAction
	// MaxCalls bounds the calls remembered. Zero means
	// [DefaultNewKeyCalls]; negative panics.
	MaxCalls int
}

func (g *NewKeyGuard) validate() error {
	switch {
	case g.Window < 0:
		return fmt.Errorf("mcphttp: Options.NewKeyGuard.Window is negative (%v)", g.Window)
	case g.MaxCalls < 0:
		return fmt.Errorf("mcphttp: Options.NewKeyGuard.MaxCalls is negative (%d)", g.MaxCalls)
	case g.Action < NewKeyReport || g.Action > NewKeyAsRetry:
		return fmt.Errorf("mcphttp: Options.NewKeyGuard.Action %d is not a NewKeyAction", g.Action)
	}
	return nil
}

// keyMemory is a NewKeyGuard at work.
type keyMemory struct {
	window time.Duration
	action NewKeyAction
	max    int
	now    func() time.Time

	mu    sync.Mutex
	calls map[string]*list.Element // by scope and call digest
	order *list.List               // of *rememberedKey, least recently used first
}

type rememberedKey struct {
	call    string   // scope and call digest
	key     idem.Key // the first key the call was made with
	forward string   // and the key it forwarded upstream
	last    time.Time
}

func newKeyMemory(g *NewKeyGuard) *keyMemory {
	if g == nil {
		return nil
	}
	m := &keyMemory{window: g.Window, action: g.Action, max: g.MaxCalls, now: time.Now,
		calls: map[string]*list.Element{}, order: list.New()}
	if m.window == 0 {
		m.window = DefaultNewKeyWindow
	}
	if m.max == 0 {
		m.max = DefaultNewKeyCalls
	}
	return m
}

// seen records that the caller of scope made the call with digest under
// key (forwarding forward), and returns the first key it was made with when
// that is another key used within the window (rotated).
func (m *keyMemory) seen(scope, digest string, key idem.Key, forward string) (first rememberedKey, rotated bool) {
	call := scope + "\x00" + digest
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for e := m.order.Front(); e != nil && now.Sub(e.Value.(*rememberedKey).last) > m.window; e = m.order.Front() {
		m.forget(e)
	}
	if e, ok := m.calls[call]; ok {
		r := e.Value.(*rememberedKey)
		r.last = now
		m.order.MoveToBack(e)
		return *r, r.key != key
	}
	m.calls[call] = m.order.PushBack(&rememberedKey{call: call, key: key, forward: forward, last: now})
	if m.order.Len() > m.max {
		m.forget(m.order.Front())
	}
	return rememberedKey{}, false
}

func (m *keyMemory) forget(e *list.Element) {
	m.order.Remove(e)
	delete(m.calls, e.Value.(*rememberedKey).call)
}

// guardKey applies the NewKeyGuard, if any, to a call with a client-chosen
// key: it reports a new key for a call seen within the window, and returns
// what to do. A refusal is the answer to give instead of running the call;
// otherwise req and forward are the claim and the forwarded key to go on
// with (the first key's, with NewKeyAsRetry).
func (m *wrapper) guardKey(r *http.Request, c call, req idem.ClaimRequest, forward string) (_ idem.ClaimRequest, _ string, refusal []byte) {
	if m.newKeys == nil || c.round != "" {
		// A later round of a multi round-trip call carries the key of its
		// first, which the guard has seen.
		return req, forward, nil
	}
	first, rotated := m.newKeys.seen(req.Scope, c.digest, req.Key, forward)
	if !rotated {
		return req, forward, nil
	}
	m.observe(r, idem.Event{Kind: idem.EventKeyRotated, Scope: req.Scope, Key: req.Key, Adapter: AdapterName})
	m.log.Warn("mcphttp: the same call came again under a new idempotency key (an agent that mints a key per retry?)",
		"key_digest", idem.KeyDigest(req.Scope, req.Key), "first_key_digest", idem.KeyDigest(req.Scope, first.key),
		"tool", c.name, "action", m.newKeys.action.String())
	switch m.newKeys.action {
	case NewKeyRefuse:
		return req, forward, errorResponse(c.rawID, rpcError{
			Code:    CodeInvalidParams,
			Message: "this call was made moments ago under another idempotency key; retry it with that key, or wait before making the same call again",
			Data:    errorData{Reason: TypeKeyRotated, Type: TypeKeyRotated},
		})
	case NewKeyAsRetry:
		req.Key = first.key
		return req, first.forward, nil
	}
	return req, forward, nil
}

func (a NewKeyAction) String() string {
	switch a {
	case NewKeyReport:
		return "report"
	case NewKeyRefuse:
		return "refuse"
	case NewKeyAsRetry:
		return "as-retry"
	}
	return fmt.Sprintf("NewKeyAction(%d)", int(a))
}
