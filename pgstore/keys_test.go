package pgstore_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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
		if got := list(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, f := range []pgstore.KeyFilter{{Limit: -1}, {Limit: pgstore.MaxKeysLimit + 1}, {Status: "done"}} {
		if _, err := s.Keys(ctx, f); err == nil {
			t.Errorf("Keys(%+v): no error", f)
		}
	}
}

// TestLabelsFindAKeyAcrossScopes: the labels a claim gives are stored with
// its row (a takeover stores its own), and an operator who has only a
// client's key, or a log line's digest, finds its rows in every scope.
func TestLabelsFindAKeyAcrossScopes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	clock := idemtest.NewClock()
	pool, _ := migrated(t)
	s := newStoreAt(t, pool, clock.Now, pgstore.Options{})
	key, err := idem.ParseClientKey("pay-1")
	if err != nil {
		t.Fatal(err)
	}
	alice := idem.Labels{Method: "POST", Route: "POST /payments", Caller: "alice"}
	done := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "scope-a", Key: key, Labels: alice}, idem.Acquired)
	if err := s.Complete(ctx, done.Token, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	long := idem.Labels{Method: "POST", Route: "/refunds/" + strings.Repeat("é", idem.MaxLabelLen)}
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "scope-b", Key: key, Labels: long, Lease: time.Second}, idem.Acquired)
	clock.Advance(2 * time.Second)
	bob := idem.Labels{Method: "PUT", Route: "PUT /refunds/{id}", Caller: "bob"}
	if c := mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "scope-b", Key: key, Labels: bob}, idem.Acquired); !c.Takeover {
		t.Fatal("the second claim of scope-b's key did not take it over")
	}
	other, _ := idem.ParseClientKey("pay-2")
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "scope-a", Key: other}, idem.Acquired)

	e, ok, err := s.Inspect(ctx, "scope-a", key)
	if err != nil || !ok || e.Labels != alice {
		t.Fatalf("Inspect: %+v %v %v, want labels %+v", e.Labels, ok, err, alice)
	}
	keys, err := s.Keys(ctx, pgstore.KeyFilter{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].Scope != "scope-b" || keys[0].Entry.Labels != bob || keys[1].Scope != "scope-a" || keys[1].Entry.Labels != alice {
		t.Fatalf("Keys by key: %+v, want scope-b's (bob, taken over) then scope-a's (alice)", keys)
	}
	keys, err = s.Keys(ctx, pgstore.KeyFilter{Digest: idem.KeyDigest("scope-a", key)})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].Scope != "scope-a" || keys[0].Key != key {
		t.Fatalf("Keys by digest: %+v, want scope-a's pay-1", keys)
	}
	if _, err := s.Keys(ctx, pgstore.KeyFilter{Digest: "ABC"}); err == nil {
		t.Error("Keys with a digest that is not 16 hex digits: no error")
	}

	// A label longer than idem.MaxLabelLen is cut at a character.
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "scope-c", Key: key, Labels: long}, idem.Acquired)
	e, _, err = s.Inspect(ctx, "scope-c", key)
	if err != nil || e.Labels.Route != long.Clip().Route || len(e.Labels.Route) > idem.MaxLabelLen || !utf8.ValidString(e.Labels.Route) {
		t.Fatalf("a long route stored as %q (%v)", e.Labels.Route, err)
	}
}

// TestLabelsOfAClaimInATransaction: a claim in a transaction, whose row is
// written once at its commit, stores the request's labels there, with a
// result sent as JSON and with a large body sent on its own.
func TestLabelsOfAClaimInATransaction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := migrated(t)
	s := newStore(t, pool, pgstore.Options{})
	labels := idem.Labels{Method: "POST", Route: "POST /invoices", Caller: "acct-7"}
	for name, body := range map[string][]byte{"small": []byte(`{"id":"inv-1"}`), "large": bytes.Repeat([]byte("x"), 100<<10)} {
		k, _ := idem.ParseClientKey("inv-" + name)
		c, tx, err := s.BeginClaim(ctx, idem.ClaimRequest{Scope: "s", Key: k, Fingerprint: "fp", Labels: labels}, idem.TxLimits{})
		if err != nil || c.Status != idem.Acquired {
			t.Fatalf("%s: BeginClaim = %v, %v", name, c.Status, err)
		}
		if err := tx.Commit(ctx, idem.Result{Status: 201, Body: body}); err != nil {
			t.Fatalf("%s: Commit: %v", name, err)
		}
		e, ok, err := s.Inspect(ctx, "s", k)
		if err != nil || !ok || e.Labels != labels {
			t.Errorf("%s: Inspect after the commit: labels %+v (%v, %v), want %+v", name, e.Labels, ok, err, labels)
		}
	}
}
