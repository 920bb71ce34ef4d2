package idemtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// contractTests are the suite's rows: the transition table and the
// invariants of idem.Store, each on a fresh store and clock.
type contractTest struct {
	name string
	test func(t *testing.T, h *harness)
}

var contractTests = []contractTest{
	{"ClaimAbsentAcquires", func(t *testing.T, h *harness) {
		c := h.claim("s", key("a"), "")
		h.wantStatus(c, idem.Acquired)
		if c.Token.Generation <= 0 {
			t.Errorf("generation = %d, want > 0", c.Token.Generation)
		}
		if c.Token.Scope != "s" || c.Token.Key != key("a") {
			t.Errorf("token = %v, want scope s key a", c.Token)
		}
		if want := h.clock.Now().Add(idem.DefaultLease); !c.LeaseEnd.Equal(want) {
			t.Errorf("lease end = %v, want %v (now + default lease, on the store's clock)", c.LeaseEnd, want)
		}
		if c.Takeover {
			t.Error("first claim reported a takeover")
		}
	}},
	{"ClaimLiveIsInFlight", func(t *testing.T, h *harness) {
		first := h.claimWithLease("s", key("a"), "", 10*time.Second)
		h.clock.Advance(3 * time.Second)
		c := h.claim("s", key("a"), "")
		h.wantStatus(c, idem.InFlight)
		if !c.LeaseEnd.Equal(first.LeaseEnd) {
			t.Errorf("in-flight lease end = %v, want the holder's %v", c.LeaseEnd, first.LeaseEnd)
		}
		if c.Token != (idem.Token{}) {
			t.Errorf("in-flight claim carries a token: %v", c.Token)
		}
	}},
	{"ConcurrentClaimsOneAcquired", func(t *testing.T, h *harness) {
		const n = 32
		var wg sync.WaitGroup
		statuses := make([]idem.ClaimStatus, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				c, err := h.s.Claim(h.ctx, idem.ClaimRequest{Scope: "s", Key: key("hot")})
				statuses[i], errs[i] = c.Status, err
			})
		}
		wg.Wait()
		acquired := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("claim %d: %v", i, errs[i])
			}
			switch statuses[i] {
			case idem.Acquired:
				acquired++
			case idem.InFlight:
			default:
				t.Errorf("claim %d: status %v", i, statuses[i])
			}
		}
		if acquired != 1 {
			t.Fatalf("%d of %d concurrent claims acquired the key, want exactly 1", acquired, n)
		}
	}},
	{"CompletedReplaysByteForByte", func(t *testing.T, h *harness) {
		results := map[string]idem.Result{
			"json":            {Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}}, Body: []byte(`{"b": 1,  "a":[2]}`)},
			"binary":          {Status: 200, Body: []byte{0, 1, 0xff, 0xfe, '"', '\\', 0}},
			"empty":           {Status: 204},
			"unicode-escapes": {Status: 200, Body: []byte(`"\u0000" é 日本 \ud800`)},
			"unreplayable":    {Status: 200, Unreplayable: true},
		}
		for name, res := range results {
			c := h.claim("s", key(name), "fp")
			h.wantStatus(c, idem.Acquired)
			h.complete(c.Token, res)
			got := h.claim("s", key(name), "fp")
			h.wantStatus(got, idem.Completed)
			if !got.Result.Equal(res) {
				t.Errorf("%s: replayed %+v, want %+v", name, got.Result, res)
			}
		}
	}},
	{"StaleAfterReleaseAndReclaim", func(t *testing.T, h *harness) {
		// ABA: g1 claims, releases; g2 claims; g1's token must not complete.
		g1 := h.claim("s", key("a"), "").Token
		h.release(g1)
		g2c := h.claim("s", key("a"), "")
		h.wantStatus(g2c, idem.Acquired)
		g2 := g2c.Token
		if g2.Generation <= g1.Generation {
			t.Fatalf("generation after release = %d, want > %d", g2.Generation, g1.Generation)
		}
		h.wantStale(h.s.Complete(h.ctx, g1, idem.Result{Status: 500}), g2.Generation)
		h.wantStale(h.s.Release(h.ctx, g1), g2.Generation)
		_, err := h.s.Renew(h.ctx, g1, 0)
		h.wantStale(err, g2.Generation)
		h.complete(g2, idem.Result{Status: 201, Body: []byte("g2")})
		if got := h.claim("s", key("a"), ""); !got.Result.Equal(idem.Result{Status: 201, Body: []byte("g2")}) {
			t.Errorf("result = %+v, want g2's", got.Result)
		}
	}},
	{"TakeoverAfterLease", func(t *testing.T, h *harness) {
		first := h.claimWithLease("s", key("a"), "", 5*time.Second)
		h.clock.Advance(5 * time.Second)
		c := h.claim("s", key("a"), "")
		h.wantStatus(c, idem.Acquired)
		if !c.Takeover {
			t.Error("takeover not reported")
		}
		if c.Token.Generation <= first.Token.Generation {
			t.Fatalf("takeover generation %d, want > %d", c.Token.Generation, first.Token.Generation)
		}
		h.wantStale(h.s.Complete(h.ctx, first.Token, idem.Result{Status: 200, Body: []byte("slow owner")}), c.Token.Generation)
		_, err := h.s.Renew(h.ctx, first.Token, time.Minute)
		h.wantStale(err, c.Token.Generation)
		h.wantStale(h.s.Release(h.ctx, first.Token), c.Token.Generation)
		h.complete(c.Token, idem.Result{Status: 200, Body: []byte("second owner")})
		if got := h.claim("s", key("a"), ""); string(got.Result.Body) != "second owner" {
			t.Errorf("replayed %q, want the second owner's result", got.Result.Body)
		}
	}},
	{"LeaseLiveUntilItsEnd", func(t *testing.T, h *harness) {
		h.claimWithLease("s", key("a"), "", 5*time.Second)
		h.clock.Advance(5*time.Second - time.Millisecond)
		h.wantStatus(h.claim("s", key("a"), ""), idem.InFlight)
	}},
	{"RenewExtendsLease", func(t *testing.T, h *harness) {
		c := h.claimWithLease("s", key("a"), "", 5*time.Second)
		h.clock.Advance(4 * time.Second)
		end, err := h.s.Renew(h.ctx, c.Token, 10*time.Second)
		if err != nil {
			t.Fatalf("renew: %v", err)
		}
		if want := h.clock.Now().Add(10 * time.Second); !end.Equal(want) {
			t.Errorf("renewed lease end = %v, want %v", end, want)
		}
		h.clock.Advance(9 * time.Second)
		got := h.claim("s", key("a"), "")
		h.wantStatus(got, idem.InFlight)
		if !got.LeaseEnd.Equal(end) {
			t.Errorf("in-flight lease end = %v, want renewed %v", got.LeaseEnd, end)
		}
		h.complete(c.Token, idem.Result{Status: 200})
	}},
	{"RenewAfterLeaseBeforeTakeover", func(t *testing.T, h *harness) {
		// Fencing is by generation: an owner whose lease ran out but whom
		// nobody replaced still holds the key.
		c := h.claimWithLease("s", key("a"), "", time.Second)
		h.clock.Advance(2 * time.Second)
		if _, err := h.s.Renew(h.ctx, c.Token, time.Minute); err != nil {
			t.Fatalf("renew of an unreplaced expired claim: %v", err)
		}
		h.wantStatus(h.claim("s", key("a"), ""), idem.InFlight)
	}},
	{"ReleaseMakesAbsent", func(t *testing.T, h *harness) {
		c := h.claim("s", key("a"), "fp1")
		h.release(c.Token)
		// Absent again: a claim with another fingerprint acquires.
		c2 := h.claim("s", key("a"), "fp2")
		h.wantStatus(c2, idem.Acquired)
		if c2.Takeover {
			t.Error("claim after release reported a takeover")
		}
	}},
	{"CompleteTwiceIsStale", func(t *testing.T, h *harness) {
		c := h.claim("s", key("a"), "")
		h.complete(c.Token, idem.Result{Status: 200, Body: []byte("first")})
		h.wantStale(h.s.Complete(h.ctx, c.Token, idem.Result{Status: 200, Body: []byte("second")}), c.Token.Generation)
		h.wantStale(h.s.Release(h.ctx, c.Token), c.Token.Generation)
		if got := h.claim("s", key("a"), ""); string(got.Result.Body) != "first" {
			t.Errorf("result = %q, want the first, never replaced", got.Result.Body)
		}
	}},
	{"UnknownTokenIsStale", func(t *testing.T, h *harness) {
		tok := idem.Token{Scope: "s", Key: key("never"), Generation: 7}
		h.wantStale(h.s.Complete(h.ctx, tok, idem.Result{}), 0)
		h.wantStale(h.s.Release(h.ctx, tok), 0)
		_, err := h.s.Renew(h.ctx, tok, 0)
		h.wantStale(err, 0)
		h.wantStatus(h.claim("s", key("never"), ""), idem.Acquired)
	}},
	{"ScopesAreSeparate", func(t *testing.T, h *harness) {
		a := h.claim("tenant-a", key("k"), "fp")
		b := h.claim("tenant-b", key("k"), "other")
		h.wantStatus(a, idem.Acquired)
		h.wantStatus(b, idem.Acquired)
		h.complete(a.Token, idem.Result{Status: 201, Body: []byte("a")})
		h.wantStatus(h.claim("tenant-b", key("k"), "other"), idem.InFlight)
		h.wantStatus(h.claim("", key("k"), "fp"), idem.Acquired)
		if got := h.claim("tenant-a", key("k"), "fp"); string(got.Result.Body) != "a" {
			t.Errorf("tenant-a result = %q", got.Result.Body)
		}
	}},
	{"FingerprintMismatch", func(t *testing.T, h *harness) {
		c := h.claim("s", key("a"), "fp1")
		_, err := h.s.Claim(h.ctx, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp2"})
		var me *idem.MismatchError
		if !errors.As(err, &me) || !errors.Is(err, idem.ErrFingerprintMismatch) || me.Completed {
			t.Fatalf("claim of a live claim with another fingerprint: %v, want *MismatchError{Completed: false}", err)
		}
		h.wantStatus(h.claim("s", key("a"), ""), idem.InFlight)
		h.complete(c.Token, idem.Result{Status: 201})
		_, err = h.s.Claim(h.ctx, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp2"})
		if !errors.As(err, &me) || !me.Completed {
			t.Fatalf("claim of a result with another fingerprint: %v, want *MismatchError{Completed: true}", err)
		}
		h.wantStatus(h.claim("s", key("a"), "fp1"), idem.Completed)
		h.wantStatus(h.claim("s", key("a"), ""), idem.Completed)
	}},
	{"RetentionEnds", func(t *testing.T, h *harness) {
		c := h.claim("s", key("a"), "fp")
		h.complete(c.Token, idem.Result{Status: 201})
		h.clock.Advance(Retention - time.Millisecond)
		h.wantStatus(h.claim("s", key("a"), "fp"), idem.Completed)
		h.clock.Advance(time.Millisecond)
		// Past retention the key is absent: even another request may take it.
		c2 := h.claim("s", key("a"), "other")
		h.wantStatus(c2, idem.Acquired)
		if c2.Token.Generation <= c.Token.Generation {
			t.Errorf("generation after retention = %d, want > %d", c2.Token.Generation, c.Token.Generation)
		}
	}},
	{"SweepRemovesOnlyWhatIsOver", func(t *testing.T, h *harness) {
		abandoned := h.claimWithLease("s", key("abandoned"), "", time.Second)
		done := h.claim("s", key("expired"), "")
		h.complete(done.Token, idem.Result{Status: 200})
		h.clock.Advance(Retention)
		live := h.claimWithLease("s", key("live"), "", time.Minute)
		kept := h.claim("s", key("kept"), "")
		h.complete(kept.Token, idem.Result{Status: 200, Body: []byte("kept")})
		st, err := h.s.Sweep(h.ctx, 0)
		if err != nil {
			t.Fatalf("sweep: %v", err)
		}
		if st != (idem.SweepStats{Abandoned: 1, Expired: 1}) {
			t.Errorf("sweep = %+v, want 1 abandoned, 1 expired", st)
		}
		if st, _ := h.s.Sweep(h.ctx, 0); st != (idem.SweepStats{}) {
			t.Errorf("second sweep = %+v, want nothing", st)
		}
		h.wantStale(h.s.Complete(h.ctx, abandoned.Token, idem.Result{}), 0)
		h.wantStatus(h.claim("s", key("live"), ""), idem.InFlight)
		if got := h.claim("s", key("kept"), ""); string(got.Result.Body) != "kept" {
			t.Errorf("kept result = %q", got.Result.Body)
		}
		h.complete(live.Token, idem.Result{Status: 200})
		c := h.claim("s", key("abandoned"), "")
		h.wantStatus(c, idem.Acquired)
		if c.Token.Generation <= abandoned.Token.Generation {
			t.Errorf("generation after sweep = %d, want > %d", c.Token.Generation, abandoned.Token.Generation)
		}
	}},
	{"SweepLimit", func(t *testing.T, h *harness) {
		for i := range 5 {
			h.claimWithLease("s", key(fmt.Sprint(i)), "", time.Second)
		}
		h.clock.Advance(time.Second)
		st, err := h.s.Sweep(h.ctx, 2)
		if err != nil || st.Abandoned != 2 {
			t.Fatalf("sweep(limit 2) = %+v, %v; want 2 abandoned", st, err)
		}
		st, err = h.s.Sweep(h.ctx, 0)
		if err != nil || st.Abandoned != 3 {
			t.Fatalf("sweep = %+v, %v; want the 3 left", st, err)
		}
	}},
	{"WaitWakesOnComplete", func(t *testing.T, h *harness) {
		c := h.claim("s", key("a"), "")
		res := idem.Result{Status: 201, Body: []byte("done")}
		got := make(chan idem.Claim, 1)
		errc := make(chan error, 1)
		go func() {
			// ClaimWait loops Wait and Claim until the holder finishes.
			w, err := idem.ClaimWait(h.ctx, h.s, idem.ClaimRequest{Scope: "s", Key: key("a")}, 30*time.Second)
			got <- w
			errc <- err
		}()
		h.complete(c.Token, res)
		if err := <-errc; err != nil {
			t.Fatalf("ClaimWait: %v", err)
		}
		w := <-got
		h.wantStatus(w, idem.Completed)
		if !w.Result.Equal(res) {
			t.Errorf("waiter got %+v, want %+v", w.Result, res)
		}
	}},
	{"WaitWakesOnRelease", func(t *testing.T, h *harness) {
		c := h.claim("s", key("a"), "")
		errc := make(chan error, 1)
		go func() { errc <- h.s.Wait(h.ctx, "s", key("a")) }()
		h.release(c.Token)
		if err := <-errc; err != nil {
			t.Fatalf("Wait: %v", err)
		}
	}},
	{"WaitRespectsContext", func(t *testing.T, h *harness) {
		h.claim("s", key("a"), "")
		ctx, cancel := context.WithCancel(h.ctx)
		cancel()
		if err := h.s.Wait(ctx, "s", key("a")); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait with a cancelled context = %v, want context.Canceled", err)
		}
		c, err := idem.ClaimWait(h.ctx, h.s, idem.ClaimRequest{Scope: "s", Key: key("a")}, 50*time.Millisecond)
		if err != nil || c.Status != idem.InFlight {
			t.Errorf("ClaimWait past its bound = %v, %v; want InFlight", c.Status, err)
		}
	}},
	{"InvalidKeys", func(t *testing.T, h *harness) {
		long := idem.KeyForRequest(idem.SessionID(make([]byte, idem.MaxKeyLen)), idem.IntRequestID(1))
		longScope := string(make([]byte, idem.MaxScopeLen+1))
		for name, req := range map[string]idem.ClaimRequest{
			"zero key":       {Scope: "s"},
			"too long key":   {Scope: "s", Key: long},
			"too long scope": {Scope: longScope, Key: key("a")},
		} {
			_, err := h.s.Claim(h.ctx, req)
			var ik *idem.InvalidKeyError
			if !errors.As(err, &ik) || !errors.Is(err, idem.ErrInvalidKey) {
				t.Errorf("claim with a %s: %v, want *InvalidKeyError", name, err)
			}
		}
		// The longest accepted scope and key are accepted.
		edge := idem.ClaimRequest{Scope: longScope[:idem.MaxScopeLen], Key: idem.KeyFromRequestID(idem.StringRequestID(string(make([]byte, (idem.MaxKeyLen-3)/3))))}
		if err := edge.Validate(); err != nil {
			t.Fatalf("edge request invalid: %v", err)
		}
		h.wantStatus(h.claim(edge.Scope, edge.Key, ""), idem.Acquired)
	}},
	{"AwkwardKeysAndScopes", func(t *testing.T, h *harness) {
		// Keys and scopes are data: quotes, NULs and non-UTF-8 are stored
		// and compared exactly.
		scopes := []string{"", "'; DROP TABLE x; --", "\x00", "\xff\xfe", "日本"}
		keys := []idem.Key{
			idem.KeyForMethodCall("s/1", idem.StringRequestID("2\x00/3"), "tools/call", "\xff"),
			idem.KeyForMethodCall("s", idem.StringRequestID("1/2\x00"), "tools/call", "\xff"),
			idem.KeyFromRequestID(idem.StringRequestID("%41")),
			idem.KeyFromRequestID(idem.StringRequestID("A")),
		}
		for _, sc := range scopes {
			for _, k := range keys {
				h.wantStatus(h.claim(sc, k, ""), idem.Acquired)
			}
		}
		for _, sc := range scopes {
			for _, k := range keys {
				h.wantStatus(h.claim(sc, k, ""), idem.InFlight)
			}
		}
	}},
	{"CancelledContext", func(t *testing.T, h *harness) {
		ctx, cancel := context.WithCancel(h.ctx)
		cancel()
		if _, err := h.s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("a")}); err == nil {
			t.Fatal("claim with a cancelled context succeeded")
		}
		h.wantStatus(h.claim("s", key("a"), ""), idem.Acquired)
	}},
}
