//go:build knowngaps

package faults_test

// Known gaps: tests of promises that do not hold yet. They are built only
// with -tags knowngaps (so CI stays green while they fail) and are listed in
// docs/reliability.md under "Known gaps":
//
//	cd integration && go test -race -tags knowngaps -run KnownGap ./faults/
//
// Each moves into the suite once its fix lands.

import (
	"testing"
	"time"
)

// The demo's create_invoice tool calls the REST API without the caller's
// credentials, so the REST middleware's scope is the same for every MCP
// principal: a second principal using the same _meta.idempotencyKey (and no
// sessionId) is answered with the first principal's invoice.
func TestKnownGapMCPReplayAcrossPrincipals(t *testing.T) {
	dbURL, d := schemaURL(t, uniq("gap-principals"))
	p := startDemo(t, demoConfig{databaseURL: dbURL, args: []string{"-log-level", "warn"}})
	a := newMCPSession(t, p.url, "X-Api-Key", "tenant-a")
	b := newMCPSession(t, p.url, "X-Api-Key", "tenant-b")
	key, customer := uniq("agent-key"), uniq("c")
	meta := `{"idempotencyKey":"` + key + `"}`
	ia := toolInvoice(t, messages(a.postRaw(toolCall("1", customer, 1, 0, meta), nil)))
	ib := toolInvoice(t, messages(b.postRaw(toolCall("1", customer, 1, 0, meta), nil)))
	if ia.ID == ib.ID {
		t.Errorf("two principals with one idempotencyKey got the same invoice %d", ia.ID)
	}
	if n := len(d.invoicesOf(customer)); n != 2 {
		t.Errorf("%d invoices, want 2", n)
	}
}

// A tools/call whose id is fractional (1.5) or beyond int64 is answered by
// go-sdk with another id (1, -9223372036854775808): a JSON-RPC client
// cannot match the answer. mcphttp does not recognise the response either,
// records nothing and leaves the claim to its lease; in the demo the retry
// after the lease still creates no second invoice, because the REST API's
// own key (forwarded by the tool) replays. mcphttp could refuse such ids
// with a JSON-RPC error instead.
func TestKnownGapMCPNonIntegerID(t *testing.T) {
	dbURL, d := schemaURL(t, uniq("gap-ids"))
	p := startDemo(t, demoConfig{databaseURL: dbURL, args: []string{"-log-level", "warn", "-lease", "1s", "-wait", "100ms"}})
	s := newMCPSession(t, p.url)
	for _, id := range []string{"1.5", "123456789012345678901234567890"} {
		customer := uniq("c")
		first := messages(s.postRaw(toolCall(id, customer, 1, 0, ""), nil))
		if len(first) == 1 && !jsonEqual(first[0].ID, []byte(id)) {
			t.Errorf("id %s answered with id %s", id, first[0].ID)
		}
		time.Sleep(1500 * time.Millisecond) // past the lease: the demonstration, not an assertion on time
		s.postRaw(toolCall(id, customer, 1, 0, ""), nil)
		if n := len(d.invoicesOf(customer)); n != 1 {
			t.Errorf("id %s: %d invoices after a call and its retry, want 1", id, n)
		}
	}
}
