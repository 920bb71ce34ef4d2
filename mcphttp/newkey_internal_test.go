package mcphttp

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestKeyMemoryWindowAndBound: a call's first key is remembered for Window
// after its last use (a new key past it is a new call, not a rotation), and
// at most MaxCalls calls are remembered, the least recently used forgotten
// first.
func TestKeyMemoryWindowAndBound(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	m := newKeyMemory(&NewKeyGuard{Window: time.Minute, MaxCalls: 2})
	m.now = func() time.Time { return now }
	key := func(s string) idem.Key {
		k, err := idem.ParseClientKey(s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if _, rotated := m.seen("s", "call-1", key("a"), "fa"); rotated {
		t.Fatal("a first call is not a rotation")
	}
	now = now.Add(50 * time.Second)
	if first, rotated := m.seen("s", "call-1", key("b"), "fb"); !rotated || first.key != key("a") || first.forward != "fa" {
		t.Fatalf("a new key within the window: rotated %v, first %+v", rotated, first)
	}
	now = now.Add(50 * time.Second) // within the window of the last use
	if _, rotated := m.seen("s", "call-1", key("a"), "fa"); rotated {
		t.Error("the first key again is not a rotation")
	}
	now = now.Add(61 * time.Second)
	if _, rotated := m.seen("s", "call-1", key("c"), "fc"); rotated {
		t.Error("a new key past the window is a new call")
	}
	m.seen("s", "call-2", key("x"), "fx")
	m.seen("s", "call-3", key("y"), "fy") // forgets call-1, the least recent
	if _, rotated := m.seen("s", "call-1", key("d"), "fd"); rotated {
		t.Error("a call forgotten for the bound is a new call")
	}
	if n := m.order.Len(); n != 2 || len(m.calls) != 2 {
		t.Errorf("%d calls remembered (%d indexed), want MaxCalls 2", n, len(m.calls))
	}
	if _, rotated := m.seen("other scope", "call-3", key("z"), "fz"); rotated {
		t.Error("another caller's call is not a rotation")
	}
}
