package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

// notifications is a LISTEN connection of the test's own on the store's
// channel. Notifications of different transactions arrive in commit order,
// so sending a sentinel after an operation committed and reading up to it
// gives exactly what the operation notified: absence is observable without
// a timeout.
type notifications struct {
	conn    *pgx.Conn
	pool    *pgxpool.Pool
	channel string
}

func listenTo(t *testing.T, ctx context.Context, pool *pgxpool.Pool, s *pgstore.Store) *notifications {
	t.Helper()
	var channel string
	if err := pool.QueryRow(ctx, pgstore.ChannelSQL(s)).Scan(&channel); err != nil {
		t.Fatal(err)
	}
	conn := listenConn(t, ctx, pool)
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		t.Fatal(err)
	}
	return &notifications{conn: conn, pool: pool, channel: channel}
}

// since returns the payloads notified since the last call (or the LISTEN).
func (n *notifications) since(t *testing.T, ctx context.Context) []string {
	t.Helper()
	if _, err := n.pool.Exec(ctx, `SELECT pg_notify($1, 'sentinel')`, n.channel); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		msg, err := n.conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for the sentinel: %v", err)
		}
		if msg.Payload == "sentinel" {
			return got
		}
		got = append(got, msg.Payload)
	}
}

// rowVersion is the row's xmin: it changes exactly when the row is written.
func rowVersion(t *testing.T, ctx context.Context, pool *pgxpool.Pool, k string) (xmin string, waited bool) {
	t.Helper()
	if err := pool.QueryRow(ctx, `SELECT xmin::text, waited FROM idem_keys WHERE key = $1`, key(k).String()).Scan(&xmin, &waited); err != nil {
		t.Fatal(err)
	}
	return xmin, waited
}

// notifyFixture is a holder store and a waiter store on separate pools (two
// instances), and a LISTEN connection of the test's own. Leases and poll
// intervals are an hour: a waiter that returns was woken by a notification
// or saw the claim end, never by a timer.
type notifyFixture struct {
	ctx            context.Context
	pool           *pgxpool.Pool
	holder, waiter *pgstore.Store
	n              *notifications
}

func newNotifyFixture(t *testing.T) *notifyFixture {
	t.Helper()
	t.Parallel()
	ctx := testCtx(t)
	pool, schema := migrated(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE invoices (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	cfg := testdb.Config(t, schema)
	cfg.ConnConfig.RuntimeParams["application_name"] = "waiter-" + schema
	f := &notifyFixture{
		ctx:    ctx,
		pool:   pool,
		holder: newStore(t, pool, pgstore.Options{PollInterval: time.Hour}),
		waiter: newStore(t, testdb.NewPool(t, cfg), pgstore.Options{PollInterval: time.Hour}),
	}
	f.n = listenTo(t, ctx, pool, f.holder)
	return f
}

func (f *notifyFixture) claim(t *testing.T, k string, lease time.Duration) idem.Token {
	t.Helper()
	return mustClaim(t, f.ctx, f.holder, idem.ClaimRequest{Scope: "s", Key: key(k), Lease: lease}, idem.Acquired).Token
}

// waitBlocked starts the waiter's Wait on k and returns once Wait has
// marked the row and blocks on a notification.
func (f *notifyFixture) waitBlocked(t *testing.T, k string) <-chan error {
	t.Helper()
	blocked := make(chan struct{}, 1)
	pgstore.SetWaitBlocked(f.waiter, func() { blocked <- struct{}{} })
	errc := make(chan error, 1)
	go func() { errc <- f.waiter.Wait(f.ctx, "s", key(k)) }()
	select {
	case <-blocked:
	case err := <-errc:
		t.Fatalf("Wait returned %v before blocking", err)
	}
	if _, waited := rowVersion(t, f.ctx, f.pool, k); !waited {
		t.Fatal("Wait blocked without marking the row")
	}
	return errc
}

func (f *notifyFixture) wantNotified(t *testing.T, k string, want bool) {
	t.Helper()
	got := f.n.since(t, f.ctx)
	payload := pgstore.NotifyPayload("s", key(k))
	switch {
	case want && (len(got) != 1 || got[0] != payload):
		t.Fatalf("notifications = %q, want exactly the key's %q", got, payload)
	case !want && len(got) != 0:
		t.Fatalf("notifications = %q, want none: nobody waited", got)
	}
}

func wantWoken(t *testing.T, errc <-chan error) {
	t.Helper()
	if err := <-errc; err != nil {
		t.Fatalf("Wait = %v, want nil (woken)", err)
	}
}

// TestNotifyOnlyWhenWaited: a completion, release or sweep notifies exactly
// when a waiter marked the row, and the waiter wakes.
func TestNotifyOnlyWhenWaited(t *testing.T) {
	t.Parallel()
	ops := []struct {
		name string
		// end ends the claim of k (token tok) and reports whether Wait
		// must have been woken by it (a sweep happens after the lease
		// ran out, which wakes the waiter by its timer anyway).
		end func(t *testing.T, f *notifyFixture, tok idem.Token)
	}{
		{"Complete", func(t *testing.T, f *notifyFixture, tok idem.Token) {
			if err := f.holder.Complete(f.ctx, tok, idem.Result{Status: 200}); err != nil {
				t.Fatal(err)
			}
		}},
		{"CompleteTx", func(t *testing.T, f *notifyFixture, tok idem.Token) {
			err := pgx.BeginFunc(f.ctx, f.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(f.ctx, `INSERT INTO invoices VALUES ('inv')`); err != nil {
					return err
				}
				return f.holder.CompleteTx(f.ctx, tx, tok, idem.Result{Status: 201})
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"Release", func(t *testing.T, f *notifyFixture, tok idem.Token) {
			if err := f.holder.Release(f.ctx, tok); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, op := range ops {
		t.Run(op.name+"/NobodyWaits", func(t *testing.T) {
			f := newNotifyFixture(t)
			tok := f.claim(t, "a", time.Hour)
			op.end(t, f, tok)
			f.wantNotified(t, "a", false)
		})
		t.Run(op.name+"/WaiterMarked", func(t *testing.T) {
			f := newNotifyFixture(t)
			tok := f.claim(t, "a", time.Hour)
			errc := f.waitBlocked(t, "a")
			op.end(t, f, tok)
			wantWoken(t, errc)
			f.wantNotified(t, "a", true)
		})
	}
	for _, waited := range []bool{false, true} {
		name := map[bool]string{false: "Sweep/NobodyWaits", true: "Sweep/WaiterMarked"}[waited]
		t.Run(name, func(t *testing.T) {
			f := newNotifyFixture(t)
			f.claim(t, "a", time.Second)
			if waited {
				// The waiter's timer is the lease's remainder: it
				// wakes at the lease end, before the sweep.
				wantWoken(t, f.waitBlocked(t, "a"))
			}
			for {
				st, err := f.holder.Sweep(f.ctx, 10)
				if err != nil {
					t.Fatal(err)
				}
				if st.Abandoned == 1 {
					break
				}
				time.Sleep(50 * time.Millisecond) // the lease runs out on the database clock
			}
			f.wantNotified(t, "a", waited)
		})
	}
}

// TestWaitInterleavingsWithCompleteTx registers a waiter at each point of a
// completer's business transaction, holding the transaction open, and
// checks that the waiter wakes at the commit (never by a timer: leases and
// poll intervals are an hour) and that a notification is sent only when the
// completer saw the mark.
func TestWaitInterleavingsWithCompleteTx(t *testing.T) {
	t.Parallel()
	res := idem.Result{Status: 201, Body: []byte(`{"id":"inv"}`)}
	begin := func(t *testing.T, f *notifyFixture) pgx.Tx {
		t.Helper()
		tx, err := f.pool.Begin(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		if _, err := tx.Exec(f.ctx, `INSERT INTO invoices VALUES ('inv')`); err != nil {
			t.Fatal(err)
		}
		return tx
	}

	t.Run("WaiterBeforeTheTransaction", func(t *testing.T) {
		f := newNotifyFixture(t)
		tok := f.claim(t, "a", time.Hour)
		errc := f.waitBlocked(t, "a")
		tx := begin(t, f)
		if err := f.holder.CompleteTx(f.ctx, tx, tok, res); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
		wantWoken(t, errc)
		f.wantNotified(t, "a", true)
	})

	t.Run("WaiterDuringTheTransactionBeforeCompleteTx", func(t *testing.T) {
		f := newNotifyFixture(t)
		tok := f.claim(t, "a", time.Hour)
		tx := begin(t, f)
		errc := f.waitBlocked(t, "a") // the key's row is not locked yet: the mark commits
		if err := f.holder.CompleteTx(f.ctx, tx, tok, res); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			t.Fatalf("Wait returned %v before the completer committed", err)
		default:
		}
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
		wantWoken(t, errc)
		f.wantNotified(t, "a", true)
	})

	// The completer's UPDATE holds the row lock: the waiter's mark waits
	// for the transaction to end, then sees its outcome.
	waitOnRowLock := func(t *testing.T, f *notifyFixture) (errc <-chan error, blocked <-chan struct{}) {
		t.Helper()
		b := make(chan struct{}, 1)
		pgstore.SetWaitBlocked(f.waiter, func() { b <- struct{}{} })
		c := make(chan error, 1)
		go func() { c <- f.waiter.Wait(f.ctx, "s", key("a")) }()
		for {
			var onLock bool
			if err := f.pool.QueryRow(f.ctx, `
				SELECT EXISTS (SELECT FROM pg_stat_activity
				 WHERE application_name = 'waiter-' || current_schema() AND wait_event_type = 'Lock')`).Scan(&onLock); err != nil {
				t.Fatal(err)
			}
			if onLock {
				return c, b
			}
			select {
			case err := <-c:
				t.Fatalf("Wait returned %v without waiting for the completer's transaction", err)
			case <-b:
				t.Fatal("Wait blocked on a notification without waiting for the completer's transaction")
			case <-time.After(5 * time.Millisecond):
			}
		}
	}

	t.Run("WaiterDuringTheTransactionAfterCompleteTxCommit", func(t *testing.T) {
		f := newNotifyFixture(t)
		tok := f.claim(t, "a", time.Hour)
		tx := begin(t, f)
		if err := f.holder.CompleteTx(f.ctx, tx, tok, res); err != nil {
			t.Fatal(err)
		}
		errc, blocked := waitOnRowLock(t, f)
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
		wantWoken(t, errc)
		select {
		case <-blocked:
			t.Fatal("Wait blocked on a notification after the completion committed")
		default:
		}
		// The completer saw no mark, and the waiter saw the completion:
		// nothing to notify.
		f.wantNotified(t, "a", false)
		mustClaim(t, f.ctx, f.waiter, idem.ClaimRequest{Scope: "s", Key: key("a")}, idem.Completed)
	})

	t.Run("WaiterDuringTheTransactionAfterCompleteTxRollback", func(t *testing.T) {
		f := newNotifyFixture(t)
		tok := f.claim(t, "a", time.Hour)
		tx := begin(t, f)
		if err := f.holder.CompleteTx(f.ctx, tx, tok, res); err != nil {
			t.Fatal(err)
		}
		errc, blocked := waitOnRowLock(t, f)
		if err := tx.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
		// Still claimed: the waiter marks it and blocks ...
		select {
		case <-blocked:
		case err := <-errc:
			t.Fatalf("Wait returned %v although the claim is still live", err)
		}
		// ... until the owner completes again.
		if err := f.holder.Complete(f.ctx, tok, res); err != nil {
			t.Fatal(err)
		}
		wantWoken(t, errc)
		f.wantNotified(t, "a", true)
	})

	t.Run("WaiterAfterTheCommit", func(t *testing.T) {
		f := newNotifyFixture(t)
		tok := f.claim(t, "a", time.Hour)
		tx := begin(t, f)
		if err := f.holder.CompleteTx(f.ctx, tx, tok, res); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
		before, _ := rowVersion(t, f.ctx, f.pool, "a")
		pgstore.SetWaitBlocked(f.waiter, func() { t.Error("Wait blocked on a completed key") })
		if err := f.waiter.Wait(f.ctx, "s", key("a")); err != nil {
			t.Fatal(err)
		}
		if after, waited := rowVersion(t, f.ctx, f.pool, "a"); after != before || waited {
			t.Fatalf("Wait on a completed key wrote the row (xmin %s → %s, waited %v)", before, after, waited)
		}
		f.wantNotified(t, "a", false)
	})
}

// TestWaitMarksOnce: the first waiter of a claim writes the mark; later
// waiters see it in their snapshot and write nothing, and all wake at the
// completion. A new claim of the key starts unmarked.
func TestWaitMarksOnce(t *testing.T) {
	f := newNotifyFixture(t)
	tok := f.claim(t, "a", time.Hour)
	first := f.waitBlocked(t, "a")
	marked, _ := rowVersion(t, f.ctx, f.pool, "a")
	second := f.waitBlocked(t, "a")
	if again, _ := rowVersion(t, f.ctx, f.pool, "a"); again != marked {
		t.Fatalf("a second waiter wrote the marked row again (xmin %s → %s)", marked, again)
	}
	if err := f.holder.Release(f.ctx, tok); err != nil {
		t.Fatal(err)
	}
	wantWoken(t, first)
	wantWoken(t, second)
	f.wantNotified(t, "a", true)

	f.claim(t, "a", time.Hour)
	if _, waited := rowVersion(t, f.ctx, f.pool, "a"); waited {
		t.Fatal("a new claim of the key starts marked")
	}
}

// TestWaiterAfterRepeatableReadSnapshot pins down the price documented in
// the package: a waiter that marks the row after a REPEATABLE READ business
// transaction took its snapshot makes that transaction's CompleteTx fail
// with a serialization error. It is a rollback, so nothing half-done
// commits: the claim is still held, the waiter still blocked, and a
// completion at READ COMMITTED wakes it.
func TestWaiterAfterRepeatableReadSnapshot(t *testing.T) {
	f := newNotifyFixture(t)
	tok := f.claim(t, "a", time.Hour)
	tx, err := f.pool.BeginTx(f.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(f.ctx, `INSERT INTO invoices VALUES ('inv')`); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	errc := f.waitBlocked(t, "a")
	err = f.holder.CompleteTx(f.ctx, tx, tok, idem.Result{Status: 201})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("CompleteTx after a waiter marked the row = %v, want a serialization failure (40001)", err)
	}
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		t.Fatalf("Wait returned %v although nothing completed", err)
	default:
	}
	if err := f.holder.Complete(f.ctx, tok, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	wantWoken(t, errc)
	var invoices int
	if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM invoices`).Scan(&invoices); err != nil || invoices != 0 {
		t.Fatalf("invoices = %d, %v; want 0 (the failed transaction rolled back)", invoices, err)
	}
}
