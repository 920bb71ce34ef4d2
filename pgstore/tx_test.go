package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

// txFixture is a migrated schema with an invoices table, a store on it,
// and a second pool whose connections are named, so that a test can see
// in pg_stat_activity when one of them waits for a lock.
type txFixture struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	s      *pgstore.Store
	// monitor reads pg_stat_activity: pool, or a direct pool when pool
	// goes through a transaction-mode pooler, whose few server
	// connections the transactions under test may all hold.
	monitor *pgxpool.Pool
}

func newTxFixture(t *testing.T, opts pgstore.Options) *txFixture {
	t.Helper()
	ctx := testCtx(t)
	pool, schema := migrated(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return &txFixture{ctx: ctx, pool: pool, schema: schema, s: newStore(t, pool, opts), monitor: sessionPool(t, pool, schema)}
}

// namedStore is another store (another instance) on the fixture's schema
// whose connections carry application_name name, with maxConns of them
// (0: pgx's default).
func (f *txFixture) namedStore(t *testing.T, name string, maxConns int32, opts pgstore.Options) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	cfg := testdb.Config(t, f.schema)
	cfg.ConnConfig.RuntimeParams["application_name"] = name + "-" + f.schema
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool := testdb.NewPool(t, cfg)
	return newStore(t, pool, opts), pool
}

// lockWaiters counts the connections named name that wait for a lock.
func (f *txFixture) lockWaiters(t *testing.T, name string) int {
	t.Helper()
	var n int
	if err := f.monitor.QueryRow(f.ctx, `
		SELECT count(*) FROM pg_stat_activity
		 WHERE application_name = $1 || '-' || $2 AND wait_event_type = 'Lock'`, name, f.schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// awaitLockWaiters waits until n connections named name wait for a lock.
func (f *txFixture) awaitLockWaiters(t *testing.T, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for f.lockWaiters(t, name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections named %s wait for a lock after 20s, want %d", f.lockWaiters(t, name), name, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (f *txFixture) invoices(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// present reports whether the key has a row anyone else can see.
func (f *txFixture) present(t *testing.T, k string) bool {
	t.Helper()
	_, ok, err := f.s.Inspect(f.ctx, "s", key(k))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

var txLimits = idem.TxLimits{Wait: 10 * time.Second, Idle: time.Minute, Execution: time.Minute}

// parallelUnlessPooled runs t in parallel, except through a
// transaction-mode pooler: there every open transaction holds one of the
// pooler's few server connections, and tests that hold a transaction open
// while others wait for it would, all at once, take them all and wait for
// each other.
func parallelUnlessPooled(t *testing.T) {
	if testdb.PoolerURL() == "" {
		t.Parallel()
	}
}

// rollbackAtEnd rolls tx back when t ends, before the pools close (a
// failed test would otherwise leave its connection out of the pool, and
// the pool's Close waiting for it).
func rollbackAtEnd(t *testing.T, tx idem.TxClaim) {
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
}

// beginClaim claims k in a transaction and wants want.
func beginClaim(t *testing.T, ctx context.Context, s *pgstore.Store, k string, limits idem.TxLimits, want idem.ClaimStatus) (idem.Claim, idem.TxClaim) {
	t.Helper()
	c, tx, err := s.BeginClaim(ctx, idem.ClaimRequest{Scope: "s", Key: key(k), Fingerprint: "fp"}, limits)
	if err != nil {
		t.Fatalf("BeginClaim %q: %v", k, err)
	}
	if c.Status != want {
		if tx != nil {
			_ = tx.Rollback(ctx)
		}
		t.Fatalf("BeginClaim %q = %v, want %v", k, c.Status, want)
	}
	if (tx != nil) != (want == idem.Acquired) {
		t.Fatalf("BeginClaim %q = %v with transaction %v", k, c.Status, tx)
	}
	return c, tx
}

// insertInvoice writes an invoice in the claim's transaction.
func insertInvoice(t *testing.T, ctx context.Context, tx idem.TxClaim, id string) {
	t.Helper()
	if _, err := pgstore.TxFrom(tx.Context(ctx)).Exec(ctx, `INSERT INTO invoices VALUES ($1)`, id); err != nil {
		t.Fatal(err)
	}
}

var txResult = idem.Result{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"inv-1"}`)}

// TestBeginClaimCommitsTogether: the claim is invisible until the commit,
// and the commit makes the invoice and the recorded result visible at
// once.
func TestBeginClaimCommitsTogether(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	c, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	if c.Token.Generation <= 0 || c.Takeover {
		t.Errorf("claim %+v", c)
	}
	insertInvoice(t, f.ctx, tx, "inv-1")
	if f.present(t, "a") {
		t.Error("the claim is visible before its transaction committed")
	}
	if n := f.invoices(t); n != 0 {
		t.Errorf("%d invoices visible before the commit", n)
	}
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Fatal(err)
	}
	if n := f.invoices(t); n != 1 {
		t.Errorf("%d invoices after the commit, want 1", n)
	}
	e := mustInspect(t, f.ctx, f.s, "a")
	if e.State != idem.StateCompleted || e.Generation != c.Token.Generation || !e.Result.Equal(txResult) {
		t.Errorf("entry after the commit: %+v", e)
	}
	got, _ := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Completed)
	if !got.Result.Equal(txResult) {
		t.Errorf("replay %+v", got.Result)
	}
	mustClaim(t, f.ctx, f.s, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp"}, idem.Completed)
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Errorf("a second Commit: %v, want nil", err)
	}
	if err := tx.Rollback(f.ctx); err != nil {
		t.Errorf("a Rollback after Commit: %v, want nil", err)
	}
	if err := f.pool.Ping(f.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBeginClaimRollbackLeavesNothing ends a claim's transaction every way
// it can end without a commit; each leaves the key absent and the invoice
// unwritten, and the next claim acquires at once.
func TestBeginClaimRollbackLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, tx idem.TxClaim)
	}{
		{"rollback", func(t *testing.T, tx idem.TxClaim) {
			if err := tx.Rollback(f.ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"a failed statement, then commit", func(t *testing.T, tx idem.TxClaim) {
			if _, err := pgstore.TxFrom(tx.Context(f.ctx)).Exec(f.ctx, `INSERT INTO invoices VALUES (NULL)`); err == nil {
				t.Fatal("inserting a NULL id succeeded")
			}
			if err := tx.Commit(f.ctx, txResult); !errors.Is(err, idem.ErrUnavailable) {
				t.Fatalf("Commit of a failed transaction = %v, want unavailable", err)
			}
		}},
		{"the connection is lost (its backend terminated)", func(t *testing.T, tx idem.TxClaim) {
			var pid int
			if err := pgstore.TxFrom(tx.Context(f.ctx)).QueryRow(f.ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			if _, err := f.pool.Exec(f.ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(f.ctx, txResult); !errors.Is(err, idem.ErrUnavailable) {
				t.Fatalf("Commit on a lost connection = %v, want unavailable", err)
			}
		}},
		{"the process is gone (its socket closed, no rollback sent)", func(t *testing.T, tx idem.TxClaim) {
			if err := pgstore.TxFrom(tx.Context(f.ctx)).Conn().PgConn().Conn().Close(); err != nil {
				t.Fatal(err)
			}
			_ = tx.Rollback(f.ctx) // gives the dead connection back to the pool
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := fmt.Sprintf("k-%s", tc.name)
			_, tx := beginClaim(t, f.ctx, f.s, k, txLimits, idem.Acquired)
			insertInvoice(t, f.ctx, tx, "inv-"+k)
			tc.end(t, tx)
			if f.present(t, k) {
				t.Error("the key has a row after the transaction ended without a commit")
			}
			if n := f.invoices(t); n != 0 {
				t.Errorf("%d invoices", n)
			}
			// No lease to wait out: the next claim takes the key as soon
			// as PostgreSQL has ended the transaction (at once, or when
			// the backend notices its client is gone).
			_, tx2 := beginClaim(t, f.ctx, f.s, k, idem.TxLimits{Wait: 5 * time.Second}, idem.Acquired)
			if err := tx2.Rollback(f.ctx); err != nil {
				t.Fatal(err)
			}
			mustClaim(t, f.ctx, f.s, idem.ClaimRequest{Scope: "s", Key: key(k)}, idem.Acquired)
		})
	}
}

// TestBeginClaimDuplicateWaitsInPostgres: a duplicate of a key whose
// transaction is open waits in PostgreSQL for that transaction (a lock
// wait on the key's advisory lock, not a notification nor a poll), then finds what
// it recorded; after a rollback it takes the key. A two-phase claim of the
// key meanwhile waits too, and never acquires it alongside.
func TestBeginClaimDuplicateWaitsInPostgres(t *testing.T) {
	parallelUnlessPooled(t)
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			parallelUnlessPooled(t)
			f := newTxFixture(t, pgstore.Options{})
			// NoListen: the duplicates cannot be woken by a notification.
			dups, _ := f.namedStore(t, "dup", 0, pgstore.Options{NoListen: true})
			_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
			insertInvoice(t, f.ctx, tx, "inv-1")
			// When the test ends, however it ends: the holder rolls
			// back, the duplicates return, and a transaction one of them
			// took is rolled back, before the pools close.
			var (
				dupsDone sync.WaitGroup
				opened   = make(chan idem.TxClaim, 1)
			)
			t.Cleanup(func() {
				_ = tx.Rollback(context.Background())
				dupsDone.Wait()
				select {
				case dtx := <-opened:
					_ = dtx.Rollback(context.Background())
				default:
				}
			})

			type outcome struct {
				c   idem.Claim
				tx  idem.TxClaim
				err error
			}
			inTx, twoPhase := make(chan outcome, 1), make(chan outcome, 1)
			dupsDone.Go(func() {
				c, dtx, err := dups.BeginClaim(f.ctx, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp"}, txLimits)
				if dtx != nil {
					opened <- dtx
				}
				inTx <- outcome{c, dtx, err}
			})
			dupsDone.Go(func() {
				c, err := dups.Claim(f.ctx, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp", Wait: txLimits.Wait})
				twoPhase <- outcome{c: c, err: err}
			})
			f.awaitLockWaiters(t, "dup", 2)
			if commit {
				if err := tx.Commit(f.ctx, txResult); err != nil {
					t.Fatal(err)
				}
				a, b := <-inTx, <-twoPhase
				if a.err != nil || b.err != nil {
					t.Fatalf("duplicates: %v, %v", a.err, b.err)
				}
				if a.c.Status != idem.Completed || !a.c.Result.Equal(txResult) || a.tx != nil || b.c.Status != idem.Completed {
					t.Fatalf("after the commit: in a transaction %+v, two-phase %+v; want both completed", a.c, b.c)
				}
				return
			}
			if err := tx.Rollback(f.ctx); err != nil {
				t.Fatal(err)
			}
			// After the rollback one of them takes the key, and the other
			// waits for it or finds it held: never both at once. The one
			// in a transaction always returns: with the key, or in
			// flight behind the two-phase claim that took it.
			a := <-inTx
			switch {
			case a.err != nil:
				t.Fatal(a.err)
			case a.c.Status == idem.Acquired:
				time.Sleep(50 * time.Millisecond)
				select {
				case b := <-twoPhase:
					t.Fatalf("the two-phase claim returned %+v, %v while the key was held in a transaction", b.c, b.err)
				default:
				}
				if err := a.tx.Commit(f.ctx, txResult); err != nil {
					t.Fatal(err)
				}
				if b := <-twoPhase; b.err != nil || b.c.Status != idem.Completed {
					t.Fatalf("two-phase after the second commit: %+v, %v; want completed", b.c, b.err)
				}
			default:
				b := <-twoPhase
				if b.err != nil || b.c.Status != idem.Acquired || a.c.Status != idem.InFlight || a.tx != nil || !a.c.LeaseEnd.Equal(b.c.LeaseEnd) {
					t.Fatalf("two-phase %+v, %v; in a transaction %+v; want the first acquired and the second in flight until its lease end", b.c, b.err, a.c)
				}
			}
		})
	}
}

// TestBeginClaimWaitIsBounded: a duplicate waits at most its Wait for an
// open transaction, then is answered in flight with no lease end (the
// holder is a transaction, whose end nobody knows).
func TestBeginClaimWaitIsBounded(t *testing.T) {
	parallelUnlessPooled(t)
	f := newTxFixture(t, pgstore.Options{})
	_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)
	for _, wait := range []time.Duration{0, 150 * time.Millisecond} {
		began := time.Now()
		c, _ := beginClaim(t, f.ctx, f.s, "a", idem.TxLimits{Wait: wait}, idem.InFlight)
		if !c.LeaseEnd.IsZero() {
			t.Errorf("wait %v: in flight with lease end %v, want none", wait, c.LeaseEnd)
		}
		if took := time.Since(began); took < wait-testdb.ClockSlack {
			t.Errorf("wait %v: answered after %v", wait, took)
		}
	}
	// The bound was the claim's alone: the transaction's own statements
	// wait as long as the session says.
	var lockTimeout string
	if err := pgstore.TxFrom(tx.Context(f.ctx)).QueryRow(f.ctx, `SHOW lock_timeout`).Scan(&lockTimeout); err != nil {
		t.Fatal(err)
	}
	if lockTimeout != "0" {
		t.Errorf("lock_timeout in the claim's transaction after the claim = %q, want the session's 0", lockTimeout)
	}
}

// TestBeginClaimAnswersTwoPhaseKeys: keys claimed and completed by the
// two-phase path are answered as Claim answers them.
func TestBeginClaimAnswersTwoPhaseKeys(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	live := mustClaim(t, f.ctx, f.s, idem.ClaimRequest{Scope: "s", Key: key("live"), Fingerprint: "fp"}, idem.Acquired)
	c, _ := beginClaim(t, f.ctx, f.s, "live", txLimits, idem.InFlight)
	if !c.LeaseEnd.Equal(live.LeaseEnd) {
		t.Errorf("in flight until %v, want the holder's lease end %v", c.LeaseEnd, live.LeaseEnd)
	}
	if err := f.s.Complete(f.ctx, live.Token, txResult); err != nil {
		t.Fatal(err)
	}
	if c, _ := beginClaim(t, f.ctx, f.s, "live", txLimits, idem.Completed); !c.Result.Equal(txResult) {
		t.Errorf("replay %+v", c.Result)
	}
	_, _, err := f.s.BeginClaim(f.ctx, idem.ClaimRequest{Scope: "s", Key: key("live"), Fingerprint: "other"}, txLimits)
	var me *idem.MismatchError
	if !errors.As(err, &me) || !me.Completed {
		t.Errorf("another fingerprint: %v, want a mismatch", err)
	}

	// An abandoned two-phase claim is taken over in the transaction.
	mustClaim(t, f.ctx, f.s, idem.ClaimRequest{Scope: "s", Key: key("gone"), Lease: time.Millisecond}, idem.Acquired)
	time.Sleep(5 * time.Millisecond)
	c, tx := beginClaim(t, f.ctx, f.s, "gone", txLimits, idem.Acquired)
	if !c.Takeover {
		t.Error("Takeover false for an abandoned claim")
	}
	if e := mustInspect(t, f.ctx, f.s, "gone"); e.Generation == c.Token.Generation {
		t.Error("the takeover is visible before its transaction committed")
	}
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Fatal(err)
	}
	if e := mustInspect(t, f.ctx, f.s, "gone"); e.State != idem.StateCompleted || e.Generation != c.Token.Generation {
		t.Errorf("after the takeover's commit: %+v", e)
	}
}

// TestBeginClaimStrictIsolation: at REPEATABLE READ and SERIALIZABLE a
// duplicate that waited for the first transaction cannot see the row it
// committed, and its INSERT fails with a serialization error; the store
// begins again, and the duplicate gets the result, never the key.
func TestBeginClaimStrictIsolation(t *testing.T) {
	parallelUnlessPooled(t)
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			parallelUnlessPooled(t)
			// Three, and the holder: PgBouncer's default pool size is 4
			// server connections per role.
			const dupCount = 3
			opts := pgstore.Options{TxOptions: pgx.TxOptions{IsoLevel: level}}
			f := newTxFixture(t, opts)
			dups, _ := f.namedStore(t, "dup", 0, opts)
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				statuses = map[idem.ClaimStatus]int{}
			)
			_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
			rollbackAtEnd(t, tx)
			insertInvoice(t, f.ctx, tx, "inv-1")
			defer wg.Wait()
			for range dupCount {
				wg.Go(func() {
					c, dtx, err := dups.BeginClaim(f.ctx, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp"}, txLimits)
					if err != nil {
						t.Errorf("duplicate: %v", err)
						return
					}
					if dtx != nil {
						_ = dtx.Rollback(f.ctx)
					}
					mu.Lock()
					statuses[c.Status]++
					mu.Unlock()
				})
			}
			f.awaitLockWaiters(t, "dup", dupCount)
			if err := tx.Commit(f.ctx, txResult); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if statuses[idem.Completed] != dupCount {
				t.Errorf("duplicates after the commit: %v, want %d completed", statuses, dupCount)
			}
			if n := f.invoices(t); n != 1 {
				t.Errorf("%d invoices, want 1", n)
			}
		})
	}
}

// TestBeginClaimStrictIsolationReplayStorm: at REPEATABLE READ and
// SERIALIZABLE, many duplicates of a completed key at once all get its
// result. Each duplicate's claim tries the key's lock exclusively and,
// failing while another duplicate's claim holds it, takes it shared; it
// must not then begin again as if it had waited for a holder whose commit
// its snapshot cannot see, or the duplicates keep failing each other's
// exclusive try and give up "undecided under contention".
func TestBeginClaimStrictIsolationReplayStorm(t *testing.T) {
	parallelUnlessPooled(t)
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			parallelUnlessPooled(t)
			const (
				dupCount = 8
				rounds   = 25
			)
			opts := pgstore.Options{TxOptions: pgx.TxOptions{IsoLevel: level}}
			f := newTxFixture(t, opts)
			_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
			if err := tx.Commit(f.ctx, txResult); err != nil {
				t.Fatal(err)
			}
			dups, _ := f.namedStore(t, "dup", dupCount, opts)
			statuses, errs := claimStorm(f.ctx, dups, "a", dupCount, rounds)
			if len(errs) > 0 {
				t.Errorf("%d of %d replays failed, the first: %v", len(errs), dupCount*rounds, errs[0])
			}
			if statuses[idem.Completed] != dupCount*rounds-len(errs) {
				t.Errorf("replays: %v, want every one completed", statuses)
			}
		})
	}
}

// TestBeginClaimFreeKeyStorm: many claims of a key that stays free (each
// one that acquires it rolls back, as a failed handler does) all decide:
// each acquires the key or waits for the one that holds it, at every
// isolation level. A claim that took the lock shared and found the key
// free begins again; the claims must not keep failing each other's
// exclusive try until they give up "undecided under contention".
func TestBeginClaimFreeKeyStorm(t *testing.T) {
	parallelUnlessPooled(t)
	for _, level := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			parallelUnlessPooled(t)
			const (
				claimers = 8
				rounds   = 25
			)
			opts := pgstore.Options{TxOptions: pgx.TxOptions{IsoLevel: level}}
			f := newTxFixture(t, opts)
			s, _ := f.namedStore(t, "claimer", claimers, opts)
			statuses, errs := claimStorm(f.ctx, s, "free", claimers, rounds)
			acquired := statuses[idem.Acquired]
			if len(errs) > 0 {
				t.Errorf("%d of %d claims failed, the first: %v", len(errs), claimers*rounds, errs[0])
			}
			if acquired != claimers*rounds-len(errs) {
				t.Errorf("%d of %d claims acquired the key, want every one (each found it free once its holder rolled back)", acquired, claimers*rounds-len(errs))
			}
			if f.present(t, "free") {
				t.Error("the key has a row after every claim rolled back")
			}
		})
	}
}

// claimStorm has claimers goroutines each claim k in a transaction rounds
// times, rolling back every transaction a claim acquired, and returns the
// claims' statuses and the errors of those that failed.
func claimStorm(ctx context.Context, s *pgstore.Store, k string, claimers, rounds int) (map[idem.ClaimStatus]int, []error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[idem.ClaimStatus]int{}
		errs     []error
	)
	for range claimers {
		wg.Go(func() {
			for range rounds {
				c, tx, err := s.BeginClaim(ctx, idem.ClaimRequest{Scope: "s", Key: key(k), Fingerprint: "fp"}, txLimits)
				if tx != nil {
					_ = tx.Rollback(ctx)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					statuses[c.Status]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return statuses, errs
}

// TestBeginClaimBounds: a transaction left idle longer than its Idle
// bound (its process frozen, say) is ended by PostgreSQL, the key is free
// again and nothing of the transaction commits; a statement of the
// transaction that runs longer than its Execution bound is cancelled, and
// the transaction cannot commit. Commit says which bound, with an
// idem.TxLimitError.
func TestBeginClaimBounds(t *testing.T) {
	parallelUnlessPooled(t)
	f := newTxFixture(t, pgstore.Options{})
	t.Run("idle", func(t *testing.T) {
		_, tx := beginClaim(t, f.ctx, f.s, "a", idem.TxLimits{Wait: time.Second, Idle: 200 * time.Millisecond}, idem.Acquired)
		insertInvoice(t, f.ctx, tx, "inv-1")
		// A duplicate that waits longer than the bound gets the key when
		// PostgreSQL ends the idle transaction.
		_, dtx := beginClaim(t, f.ctx, f.s, "a", idem.TxLimits{Wait: 10 * time.Second}, idem.Acquired)
		if err := dtx.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
		wantTxLimit(t, "Commit after the idle bound", tx.Commit(f.ctx, txResult),
			idem.TxLimitError{Limit: idem.TxIdle, Setting: "idle_in_transaction_session_timeout", Bound: 200 * time.Millisecond})
		if n := f.invoices(t); n != 0 {
			t.Errorf("%d invoices", n)
		}
	})
	t.Run("statement", func(t *testing.T) {
		_, tx := beginClaim(t, f.ctx, f.s, "b", idem.TxLimits{Wait: time.Second, Execution: 200 * time.Millisecond}, idem.Acquired)
		insertInvoice(t, f.ctx, tx, "inv-2")
		var pgErr *pgconn.PgError
		if _, err := pgstore.TxFrom(tx.Context(f.ctx)).Exec(f.ctx, `SELECT pg_sleep(5)`); !errors.As(err, &pgErr) || pgErr.Code != "57014" {
			t.Fatalf("a statement past the bound: %v, want it cancelled (57014)", err)
		}
		wantTxLimit(t, "Commit after a cancelled statement", tx.Commit(f.ctx, txResult),
			idem.TxLimitError{Limit: idem.TxStatement, Setting: "statement_timeout", Bound: 200 * time.Millisecond})
		if n := f.invoices(t); n != 0 || f.present(t, "b") {
			t.Errorf("%d invoices, key present %v", n, f.present(t, "b"))
		}
	})
}

// TestBeginClaimPoolExhausted: more duplicates than the pool has
// connections, all waiting for one open transaction; each is answered in
// flight or unavailable within its bounds, none hangs and none acquires.
func TestBeginClaimPoolExhausted(t *testing.T) {
	parallelUnlessPooled(t)
	f := newTxFixture(t, pgstore.Options{})
	dups, pool := f.namedStore(t, "dup", 2, pgstore.Options{})
	// Both connections open before the duplicates come, so that the
	// first two spend their time waiting on the row, not connecting:
	// on a loaded machine a connection can take longer to open than the
	// duplicates' deadline.
	conns := make([]*pgxpool.Conn, 2)
	for i := range conns {
		c, err := pool.Acquire(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
	_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)
	const n = 8
	var (
		wg                   sync.WaitGroup
		mu                   sync.Mutex
		inFlight, unavailble int
	)
	began := time.Now()
	for range n {
		wg.Go(func() {
			// Four rounds of two waits of 300 ms outlast the deadline:
			// the last duplicates find no connection before it.
			ctx, cancel := context.WithTimeout(f.ctx, time.Second)
			defer cancel()
			c, dtx, err := dups.BeginClaim(ctx, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp"}, idem.TxLimits{Wait: 300 * time.Millisecond})
			if dtx != nil {
				_ = dtx.Rollback(f.ctx)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, idem.ErrUnavailable):
				unavailble++
			case err != nil:
				t.Errorf("duplicate: %v", err)
			case c.Status == idem.InFlight:
				inFlight++
			default:
				t.Errorf("duplicate: %v", c.Status)
			}
		})
	}
	wg.Wait()
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the duplicates took %v", took)
	}
	if inFlight+unavailble != n || inFlight < 2 {
		t.Errorf("%d in flight and %d unavailable, want %d in all and the pool's 2 at least in flight", inFlight, unavailble, n)
	}
}

// TestTxFromBelongsToTheClaim: the work's transaction cannot end the
// claim's, takes savepoints, and refuses to be used once the claim's ended.
func TestTxFromBelongsToTheClaim(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	if pgstore.TxFrom(f.ctx) != nil {
		t.Error("TxFrom of a context without a claim is not nil")
	}
	_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	work := pgstore.TxFrom(tx.Context(f.ctx))
	if err := work.Commit(f.ctx); !errors.Is(err, pgstore.ErrTxOwned) {
		t.Errorf("the work's Commit = %v, want ErrTxOwned", err)
	}
	if err := work.Rollback(f.ctx); !errors.Is(err, pgstore.ErrTxOwned) {
		t.Errorf("the work's Rollback = %v, want ErrTxOwned", err)
	}
	// A savepoint is the work's: rolled back, its insert is gone; the
	// claim and the insert before it are not.
	insertInvoice(t, f.ctx, tx, "kept")
	err := pgx.BeginFunc(f.ctx, work, func(sp pgx.Tx) error {
		if _, err := sp.Exec(f.ctx, `INSERT INTO invoices VALUES ('dropped')`); err != nil {
			return err
		}
		return errors.New("changed my mind")
	})
	if err == nil {
		t.Fatal("BeginFunc returned nil")
	}
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Fatal(err)
	}
	var ids []string
	rows, _ := f.pool.Query(f.ctx, `SELECT id FROM invoices`)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) != 1 || ids[0] != "kept" {
		t.Errorf("invoices %v, %v; want [kept]", ids, err)
	}
	if _, err := work.Exec(f.ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("the work's Exec after the commit = %v, want ErrTxClosed", err)
	}
	if err := work.QueryRow(f.ctx, `SELECT 1`).Scan(new(int)); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("the work's QueryRow after the commit = %v, want ErrTxClosed", err)
	}
}

// TestBeginClaimGuardsTheCompletion: a work that writes its own claim's
// row cannot commit its writes without the claim's result: the completion,
// finding a row it did not take over, raises the stale-claim error, and
// the COMMIT sent behind it does not run.
func TestBeginClaimGuardsTheCompletion(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	c, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	insertInvoice(t, f.ctx, tx, "inv-1")
	if _, err := pgstore.TxFrom(tx.Context(f.ctx)).Exec(f.ctx, `
		INSERT INTO idem_keys (scope, key, generation, state, result, created_at, completed_at)
		VALUES ('s'::bytea, $1, nextval('idem_keys_generation_seq'), 'completed', '{"status":200}', now(), now())`,
		key("a").String()); err != nil {
		t.Fatal(err)
	}
	var se *idem.StaleClaimError
	if err := tx.Commit(f.ctx, txResult); !errors.As(err, &se) || se.Token != c.Token {
		t.Fatalf("Commit after the work wrote the key's row = %v, want a stale claim", err)
	}
	if n := f.invoices(t); n != 0 {
		t.Errorf("%d invoices committed without a result", n)
	}
	if err := tx.Commit(f.ctx, txResult); !errors.As(err, &se) {
		t.Errorf("Commit again = %v, want a stale claim", err)
	}
}

// tripCounter is a pgx tracer counting what a connection sends: round
// trips (a statement on its own, or a batch) and statements (a batch's
// each count).
type tripCounter struct{ trips, statements, prepares atomic.Int64 }

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.trips.Add(1)
	c.statements.Add(1)
	return ctx
}
func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}
func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.statements.Add(1)
}
func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (c *tripCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}
func (c *tripCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (c *tripCounter) reset() { c.trips.Store(0); c.statements.Store(0); c.prepares.Store(0) }

// TestTxRoundTrips counts what a claim in a transaction sends, on a warm
// connection: a new key costs the round trips of the business insert in a
// transaction of its own (BEGIN, INSERT, COMMIT), since the claim travels
// with the BEGIN and the completion with the COMMIT.
func TestTxRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, schema := migrated(t)
	cfg := testdb.Config(t, schema)
	cfg.MaxConns = 1 // one connection, so the warm-up prepares what the test uses
	tr := &tripCounter{}
	cfg.ConnConfig.Tracer = tr
	pool := testdb.NewPool(t, cfg)
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool, pgstore.Options{})
	limits := idem.TxLimits{Wait: time.Second}
	newKey := func(k string) {
		_, tx := beginClaim(t, ctx, s, k, limits, idem.Acquired)
		insertInvoice(t, ctx, tx, k)
		if err := tx.Commit(ctx, txResult); err != nil {
			t.Fatal(err)
		}
	}
	insertAlone := func(k string) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO invoices VALUES ($1)`, k)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	mustClaim(t, ctx, s, idem.ClaimRequest{Scope: "s", Key: key("two-phase"), Fingerprint: "fp"}, idem.Acquired)
	warm := func(suffix string) {
		newKey("warm" + suffix)
		insertAlone("alone-warm" + suffix)
		beginClaim(t, ctx, s, "warm"+suffix, limits, idem.Completed)
		beginClaim(t, ctx, s, "two-phase", limits, idem.InFlight)
		_, tx := beginClaim(t, ctx, s, "rolled-back"+suffix, limits, idem.Acquired)
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	warm("")

	for _, tc := range []struct {
		name              string
		op                func()
		trips, statements int64
	}{
		// BEGIN, bounds, the key's lock, the look (which puts the bounds
		// back) | INSERT | the row with its answer, COMMIT
		{"a new key: claim, insert, commit", func() { newKey("a") }, 3, 7},
		{"the insert alone, in a transaction", func() { insertAlone("alone") }, 3, 3},
		// BEGIN, bounds, the key's lock, the look | ROLLBACK
		{"a replay (no replay cache)", func() { beginClaim(t, ctx, s, "a", limits, idem.Completed) }, 2, 5},
		{"a two-phase claim in flight", func() { beginClaim(t, ctx, s, "two-phase", limits, idem.InFlight) }, 2, 5},
		{"a rollback", func() {
			_, tx := beginClaim(t, ctx, s, "r", limits, idem.Acquired)
			tr.reset()
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		}, 1, 1},
	} {
		tr.reset()
		tc.op()
		if trips, stmts, prep := tr.trips.Load(), tr.statements.Load(), tr.prepares.Load(); trips != tc.trips || stmts != tc.statements || prep != 0 {
			t.Errorf("%s: %d round trips, %d statements, %d prepares; want %d round trips, %d statements", tc.name, trips, stmts, prep, tc.trips, tc.statements)
		}
	}
}

// TestTxWaitedDuplicateRoundTrips: a duplicate that waited for a
// transaction that committed learns the result at the wake, in the round
// trip it waited in (its look follows the lock), then rolls back; after a
// rollback of the holder, it finds the key free holding its lock shared
// only, rolls back and claims again: two round trips after the wake, in
// this rare case.
func TestTxWaitedDuplicateRoundTrips(t *testing.T) {
	parallelUnlessPooled(t)
	f := newTxFixture(t, pgstore.Options{})
	cfg := testdb.Config(t, f.schema)
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["application_name"] = "dup-" + f.schema
	tr := &tripCounter{}
	cfg.ConnConfig.Tracer = tr
	dups := newStore(t, testdb.NewPool(t, cfg), pgstore.Options{})
	// Warm the duplicate's connection up: every statement prepared.
	for _, k := range []string{"warm-1", "warm-2"} {
		_, tx := beginClaim(t, f.ctx, dups, k, txLimits, idem.Acquired)
		if err := tx.Commit(f.ctx, txResult); err != nil {
			t.Fatal(err)
		}
	}
	_, tx := beginClaim(t, f.ctx, f.s, "warm-3", txLimits, idem.Acquired)
	go func() { f.awaitLockWaiters(t, "dup", 1); _ = tx.Commit(f.ctx, txResult) }()
	beginClaim(t, f.ctx, dups, "warm-3", txLimits, idem.Completed)

	for _, commit := range []bool{true, false} {
		k := fmt.Sprint("k-", commit)
		_, tx := beginClaim(t, f.ctx, f.s, k, txLimits, idem.Acquired)
		rollbackAtEnd(t, tx)
		ended := make(chan error, 1)
		go func() {
			f.awaitLockWaiters(t, "dup", 1)
			if commit {
				ended <- tx.Commit(f.ctx, txResult)
			} else {
				ended <- tx.Rollback(f.ctx)
			}
		}()
		tr.reset()
		want, trips := idem.Completed, int64(2) // the claim that waited and its look | ROLLBACK
		if !commit {
			// The claim that waited, holding the key's lock shared,
			// finds it free | ROLLBACK | a new claim.
			want, trips = idem.Acquired, 3
		}
		_, dtx := beginClaim(t, f.ctx, dups, k, txLimits, want)
		if got := tr.trips.Load(); got != trips || tr.prepares.Load() != 0 {
			t.Errorf("commit=%v: the duplicate took %d round trips (%d prepares), want %d", commit, got, tr.prepares.Load(), trips)
		}
		if err := <-ended; err != nil {
			t.Fatal(err)
		}
		if dtx != nil {
			if err := dtx.Rollback(f.ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestReadOnlyTxOptionsRefused: BeginClaim inserts the claim in its
// transaction, so read-only TxOptions would fail every claim: New refuses
// them.
func TestReadOnlyTxOptionsRefused(t *testing.T) {
	t.Parallel()
	pool, _ := testdb.Pool(t)
	_, err := pgstore.New(pool, pgstore.Options{TxOptions: pgx.TxOptions{AccessMode: pgx.ReadOnly}})
	if err == nil || !strings.Contains(err.Error(), "TxOptions.AccessMode") {
		t.Fatalf("New with read-only TxOptions: %v, want an error naming TxOptions.AccessMode", err)
	}
}

// holdTracer holds back each statement whose SQL contains marker inside
// pgx, after the work's view let it through and before it is sent: the
// moment a claim's owner may end the transaction under it.
type holdTracer struct {
	marker  string
	entered chan struct{}
	release chan struct{}
}

func (h *holdTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, h.marker) {
		h.entered <- struct{}{}
		<-h.release
	}
	return ctx
}

func (*holdTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestTxViewStatementAndEndExclusive: a statement of the work that passed
// the "still open" check when the claim's owner ends the transaction (an
// adapter rolling back while a go-sdk tool still runs on its session's
// context) runs inside the transaction, and goes with it, or is refused;
// it never runs after the end, on the connection the pool took back,
// outside the claim. The end waits for the statement. The same holds for
// a statement sent through database/sql (SQLTxFrom).
func TestTxViewStatementAndEndExclusive(t *testing.T) {
	parallelUnlessPooled(t)
	for _, via := range []struct {
		name string
		exec func(ctx context.Context, sql string) error
	}{
		{"pgx", func(ctx context.Context, sql string) error { _, err := pgstore.TxFrom(ctx).Exec(ctx, sql); return err }},
		{"database/sql", func(ctx context.Context, sql string) error {
			_, err := pgstore.SQLTxFrom(ctx).ExecContext(ctx, sql)
			return err
		}},
	} {
		t.Run(via.name, func(t *testing.T) { testStatementAndEndExclusive(t, via.exec) })
	}
}

func testStatementAndEndExclusive(t *testing.T, exec func(ctx context.Context, sql string) error) {
	f := newTxFixture(t, pgstore.Options{})
	tracer := &holdTracer{marker: "late_insert", entered: make(chan struct{}), release: make(chan struct{})}
	cfg := testdb.Config(t, f.schema)
	cfg.ConnConfig.Tracer = tracer
	cfg.MaxConns = 1 // the connection the rollback gives back is the one the statement holds
	s := newStore(t, testdb.NewPool(t, cfg), pgstore.Options{})
	endWaits := make(chan struct{})
	pgstore.SetTxEndWaits(s, func() { close(endWaits) })

	_, tx := beginClaim(t, f.ctx, s, "a", txLimits, idem.Acquired)
	statement := make(chan error, 1)
	go func() {
		statement <- exec(tx.Context(f.ctx), `INSERT INTO invoices VALUES ('late') -- late_insert`)
	}()
	<-tracer.entered // past the check, not yet sent
	rolledBack := make(chan error, 1)
	go func() { rolledBack <- tx.Rollback(f.ctx) }()
	select {
	case err := <-rolledBack:
		// The end did not wait: the statement now runs after it.
		close(tracer.release)
		if err != nil {
			t.Errorf("Rollback: %v", err)
		}
	case <-endWaits:
		close(tracer.release)
		if err := <-rolledBack; err != nil {
			t.Errorf("Rollback: %v", err)
		}
	}
	err := <-statement
	var n int
	if qerr := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM invoices WHERE id = 'late'`).Scan(&n); qerr != nil {
		t.Fatal(qerr)
	}
	if n != 0 {
		t.Errorf("the statement (err %v) committed its row after the claim's transaction rolled back", err)
	}
}
