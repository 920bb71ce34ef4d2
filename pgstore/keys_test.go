package pgstore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/pgstore"
)

// TestKeys lists keys newest first, with their status on the store's
// clock, filtered by scope, stored-key prefix (LIKE wildcards taken
// literally) and status, up to a limit.
func TestKeys(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clock := idemtest.NewClock()
	pool, _ := migrated(t)
	s := newStoreAt(t, pool, clock.Now, pgstore.Options{Retention: time.Hour})

	claim := func(scope, k string, lease time.Duration) idem.Claim {
		hk, err := idem.ParseClientKey(k)
		if err != nil {
			t.Fatal(err)
		}
		c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: scope, Key: hk, Owner: "host-1", Fingerprint: "fp", Lease: lease}, idem.Acquired)
		clock.Advance(time.Second)
		return c
	}
	claim("a", "live", 2*time.Hour)
	claim("a", "abandoned", time.Second)
	done := claim("b", "order_1", time.Hour)
	if err := s.Complete(ctx, done.Token, idem.Result{Status: 201, Body: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	old := claim("", "order%1", time.Hour)
	if err := s.Complete(ctx, old.Token, idem.Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour - 500*time.Millisecond) // "order_1" expires, "order%1" not yet

	list := func(f pgstore.KeyFilter) []string {
		t.Helper()
		keys, err := s.Keys(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, k := range keys {
			if !k.Entry.Result.Equal(idem.Result{}) || k.Entry.Owner != "host-1" || k.Entry.CreatedAt.IsZero() {
				t.Errorf("%s: entry %+v: want the row without its result", k.Key, k.Entry)
			}
			out = append(out, k.Scope+" "+k.Key.String()+" "+string(k.Status))
		}
		return out
	}
	scope := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		f    pgstore.KeyFilter
		want []string
	}{
		{"all", pgstore.KeyFilter{}, []string{" key/order%251 completed", "b key/order_1 expired", "a key/abandoned abandoned", "a key/live live"}},
		{"scope", pgstore.KeyFilter{Scope: scope("a")}, []string{"a key/abandoned abandoned", "a key/live live"}},
		{"empty scope", pgstore.KeyFilter{Scope: scope("")}, []string{" key/order%251 completed"}},
		{"prefix", pgstore.KeyFilter{KeyPrefix: "key/order_"}, []string{"b key/order_1 expired"}},
		{"prefix is not a pattern", pgstore.KeyFilter{KeyPrefix: "key/%"}, nil},
		{"status", pgstore.KeyFilter{Status: pgstore.KeyLive}, []string{"a key/live live"}},
		{"limit", pgstore.KeyFilter{Limit: 2}, []string{" key/order%251 completed", "b key/order_1 expired"}},
	} {
		if got := list(tc.f); !equalStrings(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, f := range []pgstore.KeyFilter{{Limit: -1}, {Limit: pgstore.MaxKeysLimit + 1}, {Status: "done"}} {
		if _, err := s.Keys(ctx, f); err == nil {
			t.Errorf("Keys(%+v): no error", f)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
