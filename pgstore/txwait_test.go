package pgstore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

// TestBeginClaimWaitOutlastsStatementTimeout: a duplicate of a key held in
// an open transaction waits for it as long as its Wait says, whatever bounds
// the statements of a claim's transaction: TxLimits.Execution, or a
// statement_timeout of the session's own (a role's, a connection's) that is
// shorter than Wait. It then finds what the holder recorded; and if the
// holder is still open when Wait runs out, it is in flight, never an
// unavailable store.
func TestBeginClaimWaitOutlastsStatementTimeout(t *testing.T) {
	parallelUnlessPooled(t)
	const statementBound = 100 * time.Millisecond
	for _, tc := range []struct {
		name      string
		execution time.Duration // TxLimits.Execution
		session   bool          // the duplicates' sessions have statement_timeout = statementBound
	}{
		{"TxLimits.Execution", statementBound, false},
		{"the session's statement_timeout", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parallelUnlessPooled(t)
			f := newTxFixture(t, pgstore.Options{})
			cfg := testdb.Config(t, f.schema)
			if testdb.PoolerURL() != "" {
				// A transaction-mode pooler passes no statement_timeout
				// at startup; the bound under test is PostgreSQL's.
				cfg = testdb.DirectConfig(t, f.schema)
			}
			if tc.session {
				cfg.ConnConfig.RuntimeParams["statement_timeout"] = "100"
			}
			dups := newStore(t, testdb.NewPool(t, cfg), pgstore.Options{})
			req := idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp"}

			_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
			rollbackAtEnd(t, tx)
			insertInvoice(t, f.ctx, tx, "inv-1")
			type outcome struct {
				c   idem.Claim
				err error
			}
			done, returned := make(chan outcome, 1), make(chan struct{})
			go func() {
				defer close(returned)
				c, dtx, err := dups.BeginClaim(f.ctx, req, idem.TxLimits{Wait: 30 * time.Second, Execution: tc.execution})
				if dtx != nil {
					_ = dtx.Rollback(f.ctx)
				}
				done <- outcome{c, err}
			}()
			if !testdb.WaitBlockedFor(t, f.monitor, "idem_keys", 3*statementBound, returned) {
				got := <-done
				t.Fatalf("the duplicate stopped waiting before %v, the holder still open: %+v, %v", 3*statementBound, got.c, got.err)
			}
			if err := tx.Commit(f.ctx, txResult); err != nil {
				t.Fatal(err)
			}
			got := <-done
			if got.err != nil || got.c.Status != idem.Completed || !got.c.Result.Equal(txResult) {
				t.Fatalf("the duplicate after the commit: %+v, %v; want the recorded result", got.c, got.err)
			}

			// The holder still open when the wait runs out: in flight.
			_, tx = beginClaim(t, f.ctx, f.s, "b", txLimits, idem.Acquired)
			rollbackAtEnd(t, tx)
			const wait = 4 * statementBound
			began := time.Now()
			c, dtx, err := dups.BeginClaim(f.ctx, idem.ClaimRequest{Scope: "s", Key: key("b"), Fingerprint: "fp"}, idem.TxLimits{Wait: wait, Execution: tc.execution})
			if dtx != nil {
				_ = dtx.Rollback(f.ctx)
			}
			if err != nil || c.Status != idem.InFlight || !c.LeaseEnd.IsZero() {
				t.Fatalf("the duplicate of a holder open past its wait: %+v, %v; want in flight with no lease end", c, err)
			}
			if took := time.Since(began); took < wait {
				t.Errorf("the duplicate was answered after %v, before its wait of %v ran out", took, wait)
			}
		})
	}
}
