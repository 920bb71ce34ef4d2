package pgstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

// insertInvoiceSQL writes an invoice in the claim's transaction, through
// database/sql.
func insertInvoiceSQL(t *testing.T, ctx context.Context, tx idem.TxClaim, id string) {
	t.Helper()
	if _, err := pgstore.SQLTxFrom(tx.Context(ctx)).ExecContext(ctx, `INSERT INTO invoices VALUES ($1)`, id); err != nil {
		t.Fatal(err)
	}
}

// TestSQLTxFromCommitsTogether: the work's writes through the *sql.Tx are
// the claim's transaction's: invisible until the commit, which makes them
// and the recorded result visible at once; a rollback leaves nothing.
func TestSQLTxFromCommitsTogether(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	if pgstore.SQLTxFrom(f.ctx) != nil {
		t.Error("SQLTxFrom of a context without a claim is not nil")
	}
	_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)
	insertInvoiceSQL(t, f.ctx, tx, "inv-1")
	if first, second := pgstore.SQLTxFrom(tx.Context(f.ctx)), pgstore.SQLTxFrom(tx.Context(f.ctx)); first != second {
		t.Error("two calls of SQLTxFrom for one claim returned two transactions")
	}
	// The work reads its own write, through database/sql and through pgx:
	// one transaction.
	var n int
	if err := pgstore.SQLTxFrom(tx.Context(f.ctx)).QueryRowContext(f.ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the work sees %d invoices, %v; want 1", n, err)
	}
	if err := pgstore.TxFrom(tx.Context(f.ctx)).QueryRow(f.ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the work sees %d invoices through pgx, %v; want 1", n, err)
	}
	if n := f.invoices(t); n != 0 || f.present(t, "a") {
		t.Fatalf("before the commit: %d invoices, key present %v; want nothing visible", n, f.present(t, "a"))
	}
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Fatal(err)
	}
	if n := f.invoices(t); n != 1 {
		t.Errorf("%d invoices after the commit, want 1", n)
	}
	if c, _ := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Completed); !c.Result.Equal(txResult) {
		t.Errorf("replay %+v, want the recorded result", c.Result)
	}

	_, tx = beginClaim(t, f.ctx, f.s, "b", txLimits, idem.Acquired)
	insertInvoiceSQL(t, f.ctx, tx, "inv-2")
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.invoices(t); n != 1 || f.present(t, "b") {
		t.Errorf("after the rollback: %d invoices, key present %v; want the first invoice only", n, f.present(t, "b"))
	}
}

// TestSQLTxFromBelongsToTheClaim: the work cannot end the claim's
// transaction through database/sql; its savepoints are its own; once the
// owner ended the transaction, the *sql.Tx refuses every statement.
func TestSQLTxFromBelongsToTheClaim(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)
	insertInvoiceSQL(t, f.ctx, tx, "kept")
	work := pgstore.SQLTxFrom(tx.Context(f.ctx))
	for _, stmt := range []string{
		`SAVEPOINT sp`, `INSERT INTO invoices VALUES ('dropped')`, `ROLLBACK TO SAVEPOINT sp`, `RELEASE SAVEPOINT sp`,
	} {
		if _, err := work.ExecContext(f.ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := work.Commit(); !errors.Is(err, pgstore.ErrTxOwned) {
		t.Errorf("the work's Commit = %v, want ErrTxOwned", err)
	}
	// database/sql counts the *sql.Tx as done after its Commit; the
	// claim's transaction is as it was.
	if err := work.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		t.Errorf("the work's Rollback after its Commit = %v, want sql.ErrTxDone", err)
	}
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Fatal(err)
	}
	rows, err := f.pool.Query(f.ctx, `SELECT id FROM invoices`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		ids = append(ids, id)
	}
	if rows.Err() != nil || len(ids) != 1 || ids[0] != "kept" {
		t.Errorf("invoices %v, %v; want [kept]", ids, rows.Err())
	}

	_, tx = beginClaim(t, f.ctx, f.s, "b", txLimits, idem.Acquired)
	work = pgstore.SQLTxFrom(tx.Context(f.ctx))
	if err := work.Rollback(); !errors.Is(err, pgstore.ErrTxOwned) {
		t.Errorf("the work's Rollback = %v, want ErrTxOwned", err)
	}
	if err := tx.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}

	// After the end, the *sql.Tx the work holds, and one it asks for
	// then, refuse.
	_, tx = beginClaim(t, f.ctx, f.s, "c", txLimits, idem.Acquired)
	work = pgstore.SQLTxFrom(tx.Context(f.ctx))
	ctx := tx.Context(f.ctx)
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Fatal(err)
	}
	if _, err := work.ExecContext(f.ctx, `SELECT 1`); !errors.Is(err, sql.ErrTxDone) {
		t.Errorf("the work's Exec after the commit = %v, want sql.ErrTxDone", err)
	}
	if _, err := pgstore.SQLTxFrom(ctx).ExecContext(f.ctx, `SELECT 1`); !errors.Is(err, sql.ErrTxDone) {
		t.Errorf("Exec on a *sql.Tx asked for after the commit = %v, want sql.ErrTxDone", err)
	}
}

// TestSQLTxFromRowsLeftOpen: rows the work leaves open do not keep the
// claim's transaction from committing.
func TestSQLTxFromRowsLeftOpen(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)
	insertInvoiceSQL(t, f.ctx, tx, "inv-1")
	rows, err := pgstore.SQLTxFrom(tx.Context(f.ctx)).QueryContext(f.ctx, `SELECT generate_series(1, 1000)`)
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatal(rows.Err())
	}
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Fatalf("Commit with the work's rows open: %v", err)
	}
	if n := f.invoices(t); n != 1 {
		t.Errorf("%d invoices, want 1", n)
	}
}

// TestSQLTxFromValues: values read through the *sql.Tx convert as with
// pgx's database/sql driver.
func TestSQLTxFromValues(t *testing.T) {
	t.Parallel()
	f := newTxFixture(t, pgstore.Options{})
	_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)
	var (
		b       bool
		i2, i4  int16
		i8      int64
		f4, f8  float64
		txt     string
		num     string
		id      string
		bytea   []byte
		js      []byte
		ts, day time.Time
		null    sql.NullString
	)
	at := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	err := pgstore.SQLTxFrom(tx.Context(f.ctx)).QueryRowContext(f.ctx, `
		SELECT true, 2::int2, 4::int4, $1::int8, 1.5::float4, 2.25::float8, 'txt', 12.345::numeric,
		       'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, '\x0102'::bytea, '{"a": 1}'::jsonb,
		       $2::timestamptz, '2026-03-04'::date, NULL::text`, int64(1)<<40, at).
		Scan(&b, &i2, &i4, &i8, &f4, &f8, &txt, &num, &id, &bytea, &js, &ts, &day, &null)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(b, i2, i4, i8, f4, f8, txt, num, id, bytea, string(js), ts.Equal(at), day.Format(time.DateOnly), null.Valid)
	want := fmt.Sprint(true, 2, 4, int64(1)<<40, 1.5, 2.25, "txt", "12.345", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		[]byte{1, 2}, `{"a": 1}`, true, "2026-03-04", false)
	if got != want {
		t.Errorf("values\n got %s\nwant %s", got, want)
	}
	var pgErr *pgconn.PgError
	if _, err := pgstore.SQLTxFrom(tx.Context(f.ctx)).ExecContext(f.ctx, `SAVEPOINT sp; SELECT 1/0`); !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		t.Errorf("division by zero = %v, want PostgreSQL's error", err)
	}
}

// TestSQLTxFromDuplicateWaitsInPostgres: a duplicate of a key whose work
// writes through database/sql waits in PostgreSQL for the transaction, and
// finds the result it recorded.
func TestSQLTxFromDuplicateWaitsInPostgres(t *testing.T) {
	parallelUnlessPooled(t)
	f := newTxFixture(t, pgstore.Options{})
	dups, _ := f.namedStore(t, "dup", 0, pgstore.Options{NoListen: true})
	_, tx := beginClaim(t, f.ctx, f.s, "a", txLimits, idem.Acquired)
	rollbackAtEnd(t, tx)
	insertInvoiceSQL(t, f.ctx, tx, "inv-1")
	type outcome struct {
		c   idem.Claim
		err error
	}
	dup := make(chan outcome, 1)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		c, dtx, err := dups.BeginClaim(f.ctx, idem.ClaimRequest{Scope: "s", Key: key("a"), Fingerprint: "fp"}, txLimits)
		if dtx != nil {
			_ = dtx.Rollback(context.Background())
		}
		dup <- outcome{c, err}
	})
	f.awaitLockWaiters(t, "dup", 1)
	if err := tx.Commit(f.ctx, txResult); err != nil {
		t.Fatal(err)
	}
	if o := <-dup; o.err != nil || o.c.Status != idem.Completed || !o.c.Result.Equal(txResult) {
		t.Fatalf("the duplicate: %+v, %v; want the recorded result", o.c, o.err)
	}
	if n := f.invoices(t); n != 1 {
		t.Errorf("%d invoices, want 1", n)
	}
}

// TestSQLTxFromBounds: the bounds of the claim's transaction hold for
// statements sent through database/sql, and the claim's end says which
// one ended it.
func TestSQLTxFromBounds(t *testing.T) {
	parallelUnlessPooled(t)
	const bound = 500 * time.Millisecond
	f := newTxFixture(t, pgstore.Options{})
	for _, tc := range []struct {
		name   string
		limits idem.TxLimits
		work   func(ctx context.Context, tx *sql.Tx) error
		want   idem.TxLimitError
	}{
		{"idle", idem.TxLimits{Idle: bound}, func(ctx context.Context, tx *sql.Tx) error {
			time.Sleep(3 * bound)
			return tx.QueryRowContext(ctx, `SELECT 1`).Scan(new(int))
		}, idem.TxLimitError{Limit: idem.TxIdle, Setting: "idle_in_transaction_session_timeout", Bound: bound}},
		{"a statement past Execution", idem.TxLimits{Execution: bound}, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `SELECT pg_sleep(5)`)
			return err
		}, idem.TxLimitError{Limit: idem.TxStatement, Setting: "statement_timeout", Bound: bound}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := "k-" + tc.name
			tc.limits.Wait = time.Second
			_, tx := beginClaim(t, f.ctx, f.s, k, tc.limits, idem.Acquired)
			rollbackAtEnd(t, tx)
			insertInvoiceSQL(t, f.ctx, tx, k)
			var pgErr *pgconn.PgError
			if err := tc.work(f.ctx, pgstore.SQLTxFrom(tx.Context(f.ctx))); !errors.As(err, &pgErr) {
				t.Fatalf("the work's statement after the bound: %v, want PostgreSQL's error", err)
			}
			wantTxLimit(t, "Commit", tx.Commit(f.ctx, txResult), tc.want)
			if n := f.invoices(t); n != 0 || f.present(t, k) {
				t.Errorf("%d invoices, key present %v: want nothing committed", n, f.present(t, k))
			}
		})
	}
}

// TestSQLTxRoundTrips: a new key whose work inserts through database/sql
// costs what it costs through pgx (TestTxRoundTrips): the claim travels
// with the BEGIN, the completion with the COMMIT, and the *sql.Tx sends
// nothing of its own.
func TestSQLTxRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, schema := migrated(t)
	cfg := testdb.Config(t, schema)
	cfg.MaxConns = 1
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
		insertInvoiceSQL(t, ctx, tx, k)
		var n int
		if err := pgstore.SQLTxFrom(tx.Context(ctx)).QueryRowContext(ctx, `SELECT count(*) FROM invoices WHERE id = $1`, k).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx, txResult); err != nil {
			t.Fatal(err)
		}
	}
	newKey("warm")
	tr.reset()
	newKey("a")
	// BEGIN, bounds, key lock, look | INSERT | SELECT | completion, COMMIT
	if trips, stmts, prep := tr.trips.Load(), tr.statements.Load(), tr.prepares.Load(); trips != 4 || stmts != 8 || prep != 0 {
		t.Errorf("a new key: %d round trips, %d statements, %d prepares; want 4 round trips, 8 statements", trips, stmts, prep)
	}
}
