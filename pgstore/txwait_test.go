package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// Long enough for every other statement of the test to finish within
	// it on a loaded machine.
	const statementBound = 500 * time.Millisecond
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
				cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(statementBound.Milliseconds())
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
			if took := time.Since(began); took < wait-testdb.ClockSlack {
				t.Errorf("the duplicate was answered after %v, before its wait of %v ran out", took, wait)
			}
		})
	}
}

// TestClaimWaitsForATransactionUpToItsWait: a two-phase Claim of a key
// held by a transaction still open (a claim inserted, or taken over, in
// BeginClaim; an expired row another transaction locked, which the
// takeover must wait for) waits for it in PostgreSQL up to its
// ClaimRequest.Wait, whatever the session's statement_timeout (shorter
// here), then is in flight with no lease end (nobody knows when a
// transaction ends); without a Wait it does not wait. Once the transaction
// commits, the claim finds its result.
func TestClaimWaitsForATransactionUpToItsWait(t *testing.T) {
	parallelUnlessPooled(t)
	f := newTxFixture(t, pgstore.Options{})
	cfg := testdb.Config(t, f.schema)
	if testdb.PoolerURL() != "" {
		cfg = testdb.DirectConfig(t, f.schema) // see TestBeginClaimWaitOutlastsStatementTimeout
	}
	const statementBound, wait = 500 * time.Millisecond, 1500 * time.Millisecond
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(statementBound.Milliseconds())
	cfg.ConnConfig.RuntimeParams["application_name"] = "dup-" + f.schema
	twoPhase := newStore(t, testdb.NewPool(t, cfg), pgstore.Options{})

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
			// Without a Wait on a session without a statement_timeout
			// of its own: whether the statement reaches its lock wait
			// within one is the machine's speed, not idem's bound.
			s := f.s
			if w > 0 {
				s = twoPhase
			}
			began := time.Now()
			c, err := s.Claim(f.ctx, idem.ClaimRequest{Scope: "s", Key: key(k), Fingerprint: "fp", Wait: w})
			took := time.Since(began)
			if err != nil || c.Status != idem.InFlight || !c.LeaseEnd.IsZero() {
				t.Fatalf("%s, wait %v: %+v, %v after %v; want in flight with no lease end", k, w, c, err, took)
			}
			if took < w-testdb.ClockSlack {
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

// wantTxLimit fails t unless err is an *idem.TxLimitError like want (its
// Err aside), matching idem.ErrTxLimit and unwrapping to PostgreSQL's
// error.
func wantTxLimit(t *testing.T, what string, err error, want idem.TxLimitError) {
	t.Helper()
	var le *idem.TxLimitError
	var pgErr *pgconn.PgError
	switch {
	case !errors.As(err, &le):
		t.Errorf("%s = %v, want an idem.TxLimitError", what, err)
	case le.Limit != want.Limit || le.Setting != want.Setting || le.Bound != want.Bound || le.Session != want.Session:
		t.Errorf("%s = %+v, want %+v", what, *le, want)
	case !errors.Is(err, idem.ErrTxLimit) || !errors.As(err, &pgErr) || errors.Is(err, idem.ErrUnavailable):
		t.Errorf("%s = %v: want it to match ErrTxLimit and unwrap to PostgreSQL's error, not to an unavailable store", what, err)
	}
}

// TestBeginClaimReportsTheBoundThatEndedIt: when PostgreSQL ends a claim's
// transaction at its idle bound, or cancels a statement of the work at its
// statement bound (TxLimits.Execution, or the session's statement_timeout),
// the work sees PostgreSQL's error on its statement (through Exec, Query,
// QueryRow or a batch), and the claim's Rollback or Commit says which bound
// it was (idem.TxLimitError), whatever the work answered. A cancelled
// statement the work got over, in a savepoint, is no reason: the
// transaction commits.
func TestBeginClaimReportsTheBoundThatEndedIt(t *testing.T) {
	parallelUnlessPooled(t)
	// Long enough for the statements before the pause, on a loaded machine.
	const bound = 500 * time.Millisecond
	f := newTxFixture(t, pgstore.Options{})
	cfg := testdb.Config(t, f.schema)
	if testdb.PoolerURL() != "" {
		cfg = testdb.DirectConfig(t, f.schema) // see TestBeginClaimWaitOutlastsStatementTimeout
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(bound.Milliseconds())
	withSessionTimeout := newStore(t, testdb.NewPool(t, cfg), pgstore.Options{})

	idle := idem.TxLimitError{Limit: idem.TxIdle, Setting: "idle_in_transaction_session_timeout", Bound: bound}
	statement := idem.TxLimitError{Limit: idem.TxStatement, Setting: "statement_timeout", Bound: bound}
	sessions := statement
	sessions.Session = true
	sleep := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT pg_sleep(5)`)
		return err
	}
	for _, tc := range []struct {
		name   string
		s      *pgstore.Store
		limits idem.TxLimits
		// work runs after the invoice's insert and returns the error
		// PostgreSQL's bound gave its statement, if it sent one after
		// the bound.
		work   func(ctx context.Context, tx pgx.Tx) error
		commit bool // end with Commit, not Rollback
		want   idem.TxLimitError
	}{
		{"idle, then a statement", f.s, idem.TxLimits{Idle: bound}, func(ctx context.Context, tx pgx.Tx) error {
			time.Sleep(3 * bound)
			return tx.QueryRow(ctx, `SELECT 1`).Scan(new(int))
		}, false, idle},
		{"idle, then the commit", f.s, idem.TxLimits{Idle: bound}, func(ctx context.Context, tx pgx.Tx) error {
			time.Sleep(3 * bound)
			return nil
		}, true, idle},
		{"a statement past Execution, read from rows", f.s, idem.TxLimits{Execution: bound}, func(ctx context.Context, tx pgx.Tx) error {
			rows, _ := tx.Query(ctx, `SELECT pg_sleep(5)`)
			_, err := pgx.CollectRows(rows, pgx.RowTo[any])
			return err
		}, false, statement},
		{"a statement past Execution, then the commit", f.s, idem.TxLimits{Execution: bound}, sleep, true, statement},
		{"a statement past the session's statement_timeout, in a batch", withSessionTimeout, idem.TxLimits{}, func(ctx context.Context, tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue(`SELECT pg_sleep(5)`)
			return tx.SendBatch(ctx, b).Close()
		}, false, sessions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := "k-" + tc.name
			tc.limits.Wait = time.Second
			_, tx := beginClaim(t, f.ctx, tc.s, k, tc.limits, idem.Acquired)
			rollbackAtEnd(t, tx)
			insertInvoice(t, f.ctx, tx, k)
			work := pgstore.TxFrom(tx.Context(f.ctx))
			var pgErr *pgconn.PgError
			if err := tc.work(f.ctx, work); err != nil && !errors.As(err, &pgErr) {
				t.Fatalf("the work's statement after the bound: %v, want PostgreSQL's error", err)
			}
			var err error
			if tc.commit {
				err = tx.Commit(f.ctx, txResult)
			} else {
				err = tx.Rollback(f.ctx)
			}
			wantTxLimit(t, "the end of the transaction", err, tc.want)
			if n := f.invoices(t); n != 0 || f.present(t, k) {
				t.Errorf("%d invoices, key present %v: want nothing committed", n, f.present(t, k))
			}
		})
	}

	t.Run("a cancelled statement got over in a savepoint", func(t *testing.T) {
		_, tx := beginClaim(t, f.ctx, f.s, "savepoint", idem.TxLimits{Wait: time.Second, Execution: bound}, idem.Acquired)
		rollbackAtEnd(t, tx)
		work := pgstore.TxFrom(tx.Context(f.ctx))
		if err := pgx.BeginFunc(f.ctx, work, func(sp pgx.Tx) error { return sleep(f.ctx, sp) }); err == nil {
			t.Fatal("pg_sleep(5) was not cancelled")
		}
		insertInvoice(t, f.ctx, tx, "savepoint")
		if err := tx.Commit(f.ctx, txResult); err != nil {
			t.Fatalf("Commit after the savepoint: %v", err)
		}
		if n := f.invoices(t); n != 1 {
			t.Errorf("%d invoices, want 1", n)
		}
	})
}
