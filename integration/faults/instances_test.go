package faults_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/demoproc"
)

// TestDuplicateAtAnotherInstance runs three demo instances on one database
// and, with one, two and three of them taking part, sends a request to one
// instance and its duplicate, while the original is still running, to
// another (to the same one when there is only one). Asserted: the duplicate
// waits for the original and is answered its replay (201, the same body,
// Idempotent-Replayed: true), never 409; one invoice per key. On both
// ways POST /invoices can claim.
func TestDuplicateAtAnotherInstance(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			duplicateAtAnotherInstance(t, path.args, path.oneCommit)
		})
	}
}

func duplicateAtAnotherInstance(t *testing.T, pathArgs []string, oneCommit bool) {
	app := uniq("instances")
	dbURL, d := schemaDB(t, app)
	args := append([]string{"-lease", "5s", "-wait", "10s", "-log-level", "warn"}, pathArgs...)
	var demos []*demoproc.Process
	for range 3 {
		demos = append(demos, demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: args}))
	}
	run := uniq("instances")
	for n := 1; n <= 3; n++ {
		for first := range n {
			second := (first + 1) % n
			key := fmt.Sprintf("%s-n%d-from%d", run, n, first)
			body := invoiceBody(key, 500, 700)
			original := sendInBackground(demos[first].URL(), key, body)
			d.waitInFlight(app, key, oneCommit)
			sent := time.Now()
			dup := mustPost(t, demos[second].URL(), "/invoices", body, "Idempotency-Key", key)
			orig, err := original.result()
			if !original.answered.After(sent) {
				t.Fatalf("%d instances: the original at #%d was answered before its duplicate was sent: the test did not overlap them", n, first)
			}
			if err != nil {
				t.Fatalf("%d instances, original at #%d: %v", n, first, err)
			}
			if orig.Status != http.StatusCreated {
				t.Fatalf("%d instances, original at #%d: %d %s", n, first, orig.Status, orig.Body)
			}
			if dup.Status != orig.Status || !bytes.Equal(dup.Body, orig.Body) || dup.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("%d instances: duplicate at #%d of an original at #%d answered %d %s (replayed %q), want the replay of %d %s",
					n, second, first, dup.Status, dup.Body, dup.Header.Get("Idempotent-Replayed"), orig.Status, orig.Body)
			}
			if invs := d.invoicesOf(key); len(invs) != 1 {
				t.Errorf("%d instances, key %s: %d invoices, want 1", n, key, len(invs))
			}
		}
	}
}
