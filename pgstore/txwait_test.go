package pgstore_test

import (
	"context"
	"fmt"
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

// TestClaimWaitsForATransactionUpToItsWait: a two-phase Claim of a key
// held by a transaction still open (a claim inserted, or taken over, in
// BeginClaim; an expired row another transaction locked, which the
// takeover must wait for) waits for it in PostgreSQL up to its
// ClaimRequest.Wait, whatever the session's statement_timeout, then is in
// flight with no lease end (nobody knows when a transaction ends); without
// a Wait it does not wait. Once the transaction commits, the claim finds
// its result.
func TestClaimWaitsForATransactionUpToItsWait(t *testing.T) {
	parallelUnlessPooled(t)
	f := newTxFixture(t, pgstore.Options{})
	cfg := testdb.Config(t, f.schema)
	if testdb.PoolerURL() != "" {
		cfg = testdb.DirectConfig(t, f.schema) // see TestBeginClaimWaitOutlastsStatementTimeout
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "100"
	cfg.ConnConfig.RuntimeParams["application_name"] = "dup-" + f.schema
	twoPhase := newStore(t, testdb.NewPool(t, cfg), pgstore.Options{})
	const wait = 400 * time.Millisecond

	mustClaim(t, f.ctx, f.s, idem.ClaimRequest{Scope: "s", Key: key("abandoned"), Fingerprint: "fp", Lease: time.Millisecond}, idem.Acquired)
	time.Sleep(5 * time.Millisecond) // the lease runs out
	taken, takeTx := beginClaim(t, f.ctx, f.s, "abandoned", txLimits, idem.Acquired)
	rollbackAtEnd(t, takeTx)
	if !taken.Takeover {
		t.Fatal("BeginClaim did not take the abandoned claim over")
	}
	mustClaim(t, f.ctx, f.s, idem.ClaimRequest{Scope: "s", Key: key("locked"), Fingerprint: "fp", Lease: time.Millisecond}, idem.Acquired)
	time.Sleep(5 * time.Millisecond)
	locker, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Rollback(context.Background()) })
	if _, err := locker.Exec(f.ctx, `SELECT FROM idem_keys WHERE key = $1 FOR UPDATE`, key("locked").String()); err != nil {
		t.Fatal(err)
	}
	_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)

	for _, k := range []string{"a", "abandoned", "locked"} {
		for _, w := range []time.Duration{0, wait} {
			began := time.Now()
			c, err := twoPhase.Claim(f.ctx, idem.ClaimRequest{Scope: "s", Key: key(k), Fingerprint: "fp", Wait: w})
			took := time.Since(began)
			if err != nil || c.Status != idem.InFlight || !c.LeaseEnd.IsZero() {
				t.Fatalf("%s, wait %v: %+v, %v after %v; want in flight with no lease end", k, w, c, err, took)
			}
			if took < w {
				t.Errorf("%s: answered after %v, before its wait of %v ran out", k, took, w)
			}
		}
	}

	done := make(chan error, 1)
	go func() {
		c, err := twoPhase.Claim(f.ctx, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp", Wait: 30 * time.Second})
		if err == nil && (c.Status != idem.Completed || !c.Result.Equal(txResult)) {
			err = fmt.Errorf("claim after the commit: %+v, want the result", c)
		}
		done <- err
	}()
	f.awaitLockWaiters(t, "dup", 1)
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
