// Package doortest holds what the tests of the doors that are not HTTP
// share (idemcall, idemgrpc, idemconnect): the paths each case runs on,
// and the checks of a scenario every RPC door runs alike.
package doortest

import (
	"context"
	"slices"
	"testing"

	"github.com/idemkit/idem"
)

// Path is one way a door runs protected work: on memstore, or on
// PostgreSQL, two-phase or in the claim's transaction (InTx).
type Path struct {
	Name     string
	Postgres bool
	InTx     bool
}

// Paths are the three, for a test that runs the same case on each.
var Paths = []Path{{"memstore", false, false}, {"postgres two-phase", true, false}, {"postgres in a transaction", true, true}}

// WantRefusals checks the refusals and unprotected runs among events, in
// order, against what a door named adapter reports for three calls: one
// without a key (run unprotected), one by "ada" with a key longer than
// idem.MaxHeaderKeyLen (refused), and one without a key where a key is
// required (refused).
func WantRefusals(t testing.TB, events []idem.Event, adapter string) {
	t.Helper()
	got := slices.DeleteFunc(slices.Clone(events), func(e idem.Event) bool {
		return e.Kind != idem.EventRefused && e.Kind != idem.EventUnprotected
	})
	want := []idem.Event{
		{Kind: idem.EventUnprotected, Reason: idem.UnprotectedNoKey, Adapter: adapter},
		{Kind: idem.EventRefused, Reason: idem.RefusedInvalidKey, Scope: "ada", Adapter: adapter},
		{Kind: idem.EventRefused, Reason: idem.RefusedMissingKey, Adapter: adapter},
	}
	if !slices.Equal(got, want) {
		t.Errorf("events\n%+v\nwant\n%+v", got, want)
	}
}

// inspector is the store's look at one key.
type inspector interface {
	Inspect(ctx context.Context, scope string, key idem.Key) (idem.Entry, bool, error)
}

// WantLabels checks that store holds the client key "labelled" in the
// scope "ada", with route and the caller "ada" as its labels.
func WantLabels(t testing.TB, store inspector, route string) {
	t.Helper()
	key, _ := idem.ParseClientKey("labelled")
	e, ok, err := store.Inspect(t.Context(), "ada", key)
	if want := (idem.Labels{Route: route, Caller: "ada"}); err != nil || !ok || e.Labels != want {
		t.Errorf("Inspect: labels %+v (%v, %v), want %+v", e.Labels, ok, err, want)
	}
}
