package idem

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func tkey(s string) Key { return KeyFromRequestID(StringRequestID(s)) }

func TestTableCapacity(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) *StateMachine {
		t.Helper()
		return NewStateMachine(StateMachineConfig{Capacity: 3, Retention: time.Hour})
	}
	claim := func(t *testing.T, tb *StateMachine, k string, lease time.Duration, now time.Time) (Claim, error) {
		t.Helper()
		return tb.Claim(ClaimRequest{Scope: "s", Key: tkey(k), Lease: lease}, now)
	}
	complete := func(t *testing.T, tb *StateMachine, k string, now time.Time) {
		t.Helper()
		c, err := claim(t, tb, k, 0, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.Complete(c.Token, Result{Status: 200, Body: []byte(k)}, now); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("never evicts a retained result", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		complete(t, tb, "r1", t0)
		complete(t, tb, "r2", t0.Add(time.Second))
		if _, err := claim(t, tb, "live", 0, t0); err != nil {
			t.Fatal(err)
		}
		// A flood of new keys: every one is refused, no result is lost.
		for i := range 10 {
			if _, err := claim(t, tb, fmt.Sprint("flood", i), 0, t0.Add(2*time.Second)); !errors.Is(err, ErrCapacity) {
				t.Fatalf("claim of a new key in a full table = %v, want ErrCapacity", err)
			}
		}
		for _, k := range []string{"r1", "r2"} {
			c, err := claim(t, tb, k, 0, t0.Add(2*time.Second))
			if err != nil || c.Status != Completed || string(c.Result.Body) != k {
				t.Errorf("retained result %s: %v %v, want its replay", k, c.Status, err)
			}
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
	t.Run("reclaims an expired result", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		complete(t, tb, "old", t0)
		complete(t, tb, "young", t0.Add(30*time.Minute))
		claim(t, tb, "live", time.Hour, t0)
		if _, err := claim(t, tb, "new", 0, t0.Add(time.Hour)); err != nil {
			t.Fatalf("claim with an expired result to reclaim: %v", err)
		}
		if _, ok := tb.Lookup("s", tkey("old")); ok {
			t.Error("the expired result was not reclaimed")
		}
		if _, ok := tb.Lookup("s", tkey("young")); !ok {
			t.Error("a retained result was evicted")
		}
	})
	t.Run("reclaims an abandoned claim", func(t *testing.T) {
		t.Parallel()
		tb := setup(t)
		claim(t, tb, "short", time.Second, t0)
		claim(t, tb, "long1", time.Hour, t0)
		complete(t, tb, "done", t0)
		if _, err := claim(t, tb, "new", 0, t0.Add(2*time.Second)); err != nil {
			t.Fatalf("claim with an abandoned entry to reclaim: %v", err)
		}
		if _, ok := tb.Lookup("s", tkey("short")); ok {
			t.Error("the abandoned claim was not the one reclaimed")
		}
	})
}

func TestTableCompletionQueueSkipsRemovedEntries(t *testing.T) {
	t.Parallel()
	tb := NewStateMachine(StateMachineConfig{Capacity: 2, Retention: time.Hour})
	a, _ := tb.Claim(ClaimRequest{Key: tkey("a")}, t0)
	_ = tb.Complete(a.Token, Result{Status: 200}, t0)
	tb.Forget("", tkey("a")) // leaves a stale queue item behind
	b, _ := tb.Claim(ClaimRequest{Key: tkey("b")}, t0)
	_ = tb.Complete(b.Token, Result{Status: 201}, t0.Add(time.Minute))
	c, _ := tb.Claim(ClaimRequest{Key: tkey("c"), Lease: 2 * time.Hour}, t0)
	// At a's expiry the stale item is skipped; b is retained, so d waits.
	if _, err := tb.Claim(ClaimRequest{Key: tkey("d")}, t0.Add(time.Hour)); !errors.Is(err, ErrCapacity) {
		t.Fatalf("claim d: %v, want ErrCapacity", err)
	}
	if _, err := tb.Claim(ClaimRequest{Key: tkey("d")}, t0.Add(time.Hour+time.Minute)); err != nil {
		t.Fatalf("claim d after b expired: %v", err)
	}
	if _, ok := tb.Lookup("", tkey("b")); ok {
		t.Error("expired b should have been reclaimed for d")
	}
	if e, ok := tb.Lookup("", tkey("c")); !ok || e.Generation != c.Token.Generation {
		t.Error("claim c was removed")
	}
}

func TestTableSweepQueueCompaction(t *testing.T) {
	t.Parallel()
	tb := NewStateMachine(StateMachineConfig{Retention: time.Second})
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
func TestTableByteBound(t *testing.T) {
	t.Parallel()
	tb := NewStateMachine(StateMachineConfig{MaxBytes: 64 << 10, Retention: time.Hour})
	big := Result{Status: 200, Body: make([]byte, 20<<10)}
	var kept []Token
	for i := 0; ; i++ {
		c, err := tb.Claim(ClaimRequest{Scope: "s", Key: tkey(fmt.Sprint(i))}, t0)
		if errors.Is(err, ErrCapacity) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 10 {
			t.Fatalf("%d results of 20 KiB fit in 64 KiB", i)
		}
		if err := tb.Complete(c.Token, big, t0); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, c.Token)
	}
	if len(kept) < 3 || tb.Bytes() > 64<<10+int64(len(big.Body)) {
		t.Fatalf("%d results kept, %d bytes held; want 3 or more, within the bound plus one result", len(kept), tb.Bytes())
	}
	for _, tok := range kept {
		if c, err := tb.Claim(ClaimRequest{Scope: "s", Key: tok.Key}, t0); err != nil || c.Status != Completed {
			t.Errorf("retained result %v: %v %v", tok, c.Status, err)
		}
	}
	// Past retention, the results are reclaimed and the bytes freed.
	if c, err := tb.Claim(ClaimRequest{Scope: "s", Key: tkey("after")}, t0.Add(time.Hour)); err != nil || c.Status != Acquired {
		t.Fatalf("claim after retention: %v %v", c.Status, err)
	}
	if tb.Len() != 1 || tb.Bytes() > 1024 {
		t.Errorf("after reclaiming: %d entries, %d bytes", tb.Len(), tb.Bytes())
	}
	tb.Forget("s", tkey("after"))
	if tb.Bytes() != 0 {
		t.Errorf("empty table holds %d bytes", tb.Bytes())
	}
}

// TestTableBoundedRule applies random claims, completions, releases, sweeps
// and clock steps to a table bounded to four keys and 4 KiB, and checks the
// bounded-resource rule after every step: every result still retained is
// present and unchanged, the count bound holds, and a claim refused for
// capacity leaves nothing reclaimable behind (it reclaimed first).
func TestTableBoundedRule(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 1))
			const capacity, maxBytes = 4, 4 << 10
			tb := NewStateMachine(StateMachineConfig{Capacity: capacity, MaxBytes: maxBytes, Retention: time.Minute})
			type recorded struct {
				res     Result
				expires time.Time
			}
			retained := map[scopedKey]recorded{}
			var tokens []Token
			now := t0
			for step := range 2000 {
				k := tkey(fmt.Sprint(rng.IntN(12)))
				switch n := rng.IntN(10); {
				case n < 5:
					c, err := tb.Claim(ClaimRequest{Scope: "s", Key: k, Lease: time.Duration(1+rng.IntN(30)) * time.Second}, now)
					switch {
					case errors.Is(err, ErrCapacity):
						reclaimable := 0
						for _, e := range tb.entries {
							if e.State == StateClaimed && e.leaseOver(now) || e.State == StateCompleted && e.expired(now) {
								reclaimable++
							}
						}
						if reclaimable > 0 {
							t.Fatalf("step %d: ErrCapacity with %d reclaimable entries", step, reclaimable)
						}
					case err != nil:
						t.Fatalf("step %d: %v", step, err)
					case c.Status == Acquired:
						tokens = append(tokens, c.Token)
					}
				case n < 7 && len(tokens) > 0:
					tok := tokens[rng.IntN(len(tokens))]
					res := Result{Status: 200, Body: make([]byte, rng.IntN(1500))}
					if tb.Complete(tok, res, now) == nil {
						retained[scopedKey{tok.Scope, tok.Key}] = recorded{res, now.Add(time.Minute)}
					}
				case n < 8 && len(tokens) > 0:
					_ = tb.Release(tokens[rng.IntN(len(tokens))])
				case n < 9:
					tb.Sweep(now, 0)
				default:
					now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
				}
				for sk, r := range retained {
					if !now.Before(r.expires) {
						delete(retained, sk)
						continue
					}
					e, ok := tb.Lookup(sk.scope, sk.key)
					if !ok || e.State != StateCompleted || !e.Result.Equal(r.res) {
						t.Fatalf("step %d: retained result %v lost or changed", step, sk.key)
					}
				}
				if tb.Len() > capacity {
					t.Fatalf("step %d: %d entries, capacity %d", step, tb.Len(), capacity)
				}
			}
		})
	}
}
