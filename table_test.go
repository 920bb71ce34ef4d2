package idem

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func tkey(s string) Key { return KeyFromRequestID(StringRequestID(s)) }

func TestTableCapacity(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) *Table {
		t.Helper()
		return NewTable(TableConfig{Capacity: 3, Retention: time.Hour})
	}
	claim := func(t *testing.T, tb *Table, k string, lease time.Duration, now time.Time) (Claim, error) {
		t.Helper()
		return tb.Claim(ClaimRequest{Scope: "s", Key: tkey(k), Lease: lease}, now)
	}
	t.Run("evicts the oldest result first", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		for i, k := range []string{"r1", "r2"} {
			c, _ := claim(t, tb, k, 0, t0)
			if err := tb.Complete(c.Token, Result{Status: 200 + i}, t0.Add(time.Duration(i)*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := claim(t, tb, "live", 0, t0); err != nil {
			t.Fatal(err)
		}
		c, err := claim(t, tb, "new", 0, t0)
		if err != nil || c.Status != Acquired {
			t.Fatalf("claim at capacity: %v, %v", c.Status, err)
		}
		if _, ok := tb.Lookup("s", tkey("r1")); ok {
			t.Error("oldest result r1 was not evicted")
		}
		if _, ok := tb.Lookup("s", tkey("r2")); !ok {
			t.Error("r2 was evicted before the older r1")
		}
		if tb.Len() != 3 {
			t.Errorf("len = %d, want 3", tb.Len())
		}
	})
	t.Run("full of live claims fails", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		for i := range 3 {
			if _, err := claim(t, tb, fmt.Sprint(i), time.Minute, t0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := claim(t, tb, "one too many", 0, t0); !errors.Is(err, ErrCapacity) {
			t.Fatalf("claim with every entry live = %v, want ErrCapacity", err)
		}
		// An existing key is not a new entry: it still answers.
		if c, err := claim(t, tb, "0", 0, t0); err != nil || c.Status != InFlight {
			t.Fatalf("claim of a present key at capacity = %v, %v", c.Status, err)
		}
	})
	t.Run("evicts an abandoned claim when no result is left", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		claim(t, tb, "short", time.Second, t0)
		claim(t, tb, "long1", time.Hour, t0)
		claim(t, tb, "long2", time.Hour, t0)
		if _, err := claim(t, tb, "new", 0, t0.Add(2*time.Second)); err != nil {
			t.Fatalf("claim with an abandoned entry to evict: %v", err)
		}
		if _, ok := tb.Lookup("s", tkey("short")); ok {
			t.Error("the abandoned claim was not the one evicted")
		}
	})
}

func TestTableCompletionQueueSkipsRemovedEntries(t *testing.T) {
	t.Parallel()
	tb := NewTable(TableConfig{Capacity: 2, Retention: time.Hour})
	a, _ := tb.Claim(ClaimRequest{Key: tkey("a")}, t0)
	_ = tb.Complete(a.Token, Result{Status: 200}, t0)
	tb.Forget("", tkey("a")) // leaves a stale queue item behind
	b, _ := tb.Claim(ClaimRequest{Key: tkey("b")}, t0)
	_ = tb.Complete(b.Token, Result{Status: 201}, t0)
	c, _ := tb.Claim(ClaimRequest{Key: tkey("c")}, t0)
	if _, err := tb.Claim(ClaimRequest{Key: tkey("d")}, t0); err != nil {
		t.Fatalf("claim d: %v", err)
	}
	if _, ok := tb.Lookup("", tkey("b")); ok {
		t.Error("b should have been evicted for d")
	}
	if e, ok := tb.Lookup("", tkey("c")); !ok || e.Generation != c.Token.Generation {
		t.Error("live claim c was evicted")
	}
}

func TestTableSweepQueueCompaction(t *testing.T) {
	t.Parallel()
	tb := NewTable(TableConfig{Retention: time.Second})
	now := t0
	for i := range 5000 {
		c, err := tb.Claim(ClaimRequest{Key: tkey(fmt.Sprint(i))}, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.Complete(c.Token, Result{}, now); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Millisecond)
	}
	st := tb.Sweep(now, 0)
	if st.Expired != 4001 || tb.Len() != 999 { // expiry is inclusive: i ms + 1s <= 5000 ms
		t.Fatalf("sweep = %+v, len %d; want 4001 expired, 999 left", st, tb.Len())
	}
	if len(tb.completions)-tb.head != 999 {
		t.Errorf("completion queue holds %d live items, want 999", len(tb.completions)-tb.head)
	}
}
