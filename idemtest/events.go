package idemtest

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// Events records the events the engine or an adapter reports, for a test
// that checks them: pass its Observe where an idem.Event observer goes, or
// its ObserveHTTP where an adapter's Observer option goes. The zero value
// is empty and ready to use; it is safe for concurrent use.
type Events struct {
	mu     sync.Mutex
	events []idem.Event
	at     []time.Time   // when each event was recorded
	change chan struct{} // closed on the next Observe; nil until a Wait needs it
}

// Observe records e, and the time it was recorded (time.Now: the bubble's
// clock inside a synctest).
func (l *Events) Observe(e idem.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	l.at = append(l.at, time.Now())
	if l.change != nil {
		close(l.change)
		l.change = nil
	}
}

// ObserveHTTP records e. It has the signature of the adapters' Observer
// options (middleware and mcphttp), which also pass the request.
func (l *Events) ObserveHTTP(_ *http.Request, e idem.Event) { l.Observe(e) }

// All returns every recorded event, in the order recorded.
func (l *Events) All() []idem.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]idem.Event(nil), l.events...)
}

// Count returns how many events of kind k were recorded.
func (l *Events) Count(k idem.EventKind) int { return len(l.Of(k)) }

// Of returns the recorded events of kind k, in the order recorded.
func (l *Events) Of(k idem.EventKind) []idem.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []idem.Event
	for _, e := range l.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// At returns when each event of kind k was recorded, in the order
// recorded.
func (l *Events) At(k idem.EventKind) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Time
	for i, e := range l.events {
		if e.Kind == k {
			out = append(out, l.at[i])
		}
	}
	return out
}

// Kinds returns the kinds of every recorded event, in the order recorded,
// for a failure message.
func (l *Events) Kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ks []string
	for _, e := range l.events {
		ks = append(ks, e.Kind.String())
	}
	return ks
}

// Wait blocks until at least n events of kind k are recorded, or ctx ends
// (then it returns ctx's cause). It is how a test waits for work that ends
// on another goroutine, instead of sleeping.
func (l *Events) Wait(ctx context.Context, k idem.EventKind, n int) error {
	return l.WaitFor(ctx, func(events []idem.Event) bool {
		count := 0
		for _, e := range events {
			if e.Kind == k {
				count++
			}
		}
		return count >= n
	})
}

// WaitAny blocks until an event of one of kinds is recorded, or ctx ends
// (then it returns ctx's cause): for example the completion or release
// that ends a request running on.
func (l *Events) WaitAny(ctx context.Context, kinds ...idem.EventKind) error {
	return l.WaitFor(ctx, func(events []idem.Event) bool {
		return slices.ContainsFunc(events, func(e idem.Event) bool { return slices.Contains(kinds, e.Kind) })
	})
}

// WaitFor blocks until done, called with the events recorded so far (not
// to be kept or changed), reports true, or ctx ends (then it returns
// ctx's cause). done is called again after each new event.
func (l *Events) WaitFor(ctx context.Context, done func([]idem.Event) bool) error {
	for {
		l.mu.Lock()
		if done(l.events) {
			l.mu.Unlock()
			return nil
		}
		if l.change == nil {
			l.change = make(chan struct{})
		}
		change := l.change
		l.mu.Unlock()
		select {
		case <-change:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}
