package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/idemkit/idem/internal/testdb"
)

// The demo behind a transaction-mode pooler (`make test-pgbouncer` starts
// PgBouncer and sets TEST_POOLER_URL): instance a reaches the database
// through the pooler and LISTENs and migrates on a direct connection
// (-direct-url); instance b has nothing but the pooler and polls
// (-no-listen). A duplicate of a slow request sent to the other instance
// waits and gets the original's response, both ways; one invoice per key.
func TestDemoThroughPooler(t *testing.T) {
	if testdb.PoolerURL() == "" {
		t.Skip("TEST_POOLER_URL is not set: `make test-pgbouncer` runs this test through PgBouncer")
	}
	t.Parallel()
	schema := testdb.Schema(t)
	direct, conn := schemaConn(t, schema)
	pooled := testdb.PoolerURLFor(t, schema)
	a := startDemo(t, pooled, "-direct-url", direct, "-wait", "1m")
	b := startDemo(t, pooled, "-no-listen", "-migrate=false", "-wait", "1m")

	for i, pair := range [][2]*demo{{a, b}, {b, a}} {
		original, duplicate := pair[0], pair[1]
		key := fmt.Sprint("slow-", i)
		slow := `{"customer":"slow","amount_cents":7,"delay_ms":1000}`
		orig := make(chan response, 1)
		go func() { orig <- original.do("POST", "/invoices", key, slow) }()
		waitForInFlight(t, conn, "key/"+key)
		dup := duplicate.do("POST", "/invoices", key, slow)
		first := <-orig
		mustStatus(t, "original", first, http.StatusCreated)
		mustStatus(t, "waiting duplicate", dup, http.StatusCreated)
		if string(dup.body) != string(first.body) || dup.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s: duplicate got %s (replayed %q), want the original's %s replayed",
				key, dup.body, dup.header.Get("Idempotent-Replayed"), first.body)
		}
		retry := original.do("POST", "/invoices", key, slow)
		if string(retry.body) != string(first.body) || retry.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s: retry got %s (replayed %q), want a replay", key, retry.body, retry.header.Get("Idempotent-Replayed"))
		}
	}
	if invs := b.invoices(); len(invs) != 2 {
		t.Fatalf("%d invoices, want 2 (one per key): %+v", len(invs), invs)
	}
}
