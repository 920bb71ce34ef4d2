package main

import (
	"net/http"
	"testing"
)

// TestShortLeaseLongPause: with a database and the one-commit path (the
// default), a lease shorter than the handler's pause between two
// statements (-lease 2s, delay_ms 3000: the handler waits inside the
// claim's transaction before it inserts the invoice) is no bound on it:
// nothing renews such a claim, and the transaction may stay idle as long
// as the request may run. The invoice is created, once.
func TestShortLeaseLongPause(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgURL(t)
	d := startDemo(t, dbURL, "-lease", "2s")
	r := d.do("POST", "/invoices", "slow-1", `{"customer":"acme","amount_cents":1200,"delay_ms":3000}`)
	mustStatus(t, "a request that pauses 3s under a 2s lease", r, http.StatusCreated)
	if invs := d.invoices(); len(invs) != 1 {
		t.Fatalf("%d invoices, want 1: %+v", len(invs), invs)
	}
}
