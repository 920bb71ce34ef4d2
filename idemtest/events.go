package idemtest

import (
	"sync"

	"github.com/idemkit/idem"
)

// Events records the events the engine or an adapter reports, for a test
// that checks them: pass its Observe where an idem.Event observer goes.
// The zero value is empty and ready to use; it is safe for concurrent use.
type Events struct {
	mu     sync.Mutex
	events []idem.Event
}

// Observe records e.
func (l *Events) Observe(e idem.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

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
