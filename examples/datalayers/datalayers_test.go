package datalayers_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"go.uber.org/goleak"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/examples/datalayers/sqlc/invoicespgx"
	"github.com/idemkit/idem/examples/datalayers/sqlc/invoicessql"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }

// Invoice is the row every layer writes.
type Invoice struct {
	ID          int64  `db:"id" gorm:"primaryKey" bun:"id,pk,autoincrement"`
	Customer    string `db:"customer" bun:"customer"`
	AmountCents int64  `db:"amount_cents" bun:"amount_cents"`

	bun.BaseModel `db:"-" gorm:"-" bun:"table:invoices"`
}

// service is what a service on PostgreSQL has: a pgx pool, and a *sql.DB
// on it for the layers written against database/sql.
type service struct {
	pool *pgxpool.Pool
	db   *sql.DB
}

// insertFunc writes in through a data layer, in the claim's transaction
// that ctx carries, and returns the invoice's id.
type insertFunc func(ctx context.Context, svc service, in Invoice) (int64, error)

// The layers, each bound to the claim's transaction.
var layers = []struct {
	name   string
	insert insertFunc
}{
	{"sqlc pgx/v5", func(ctx context.Context, svc service, in Invoice) (int64, error) {
		// Queries.WithTx with the claim's pgx.Tx.
		q := invoicespgx.New(svc.pool).WithTx(pgstore.TxFrom(ctx))
		return q.CreateInvoice(ctx, invoicespgx.CreateInvoiceParams{Customer: in.Customer, AmountCents: in.AmountCents})
	}},
	{"sqlc database/sql", func(ctx context.Context, svc service, in Invoice) (int64, error) {
		// Queries.WithTx with the claim's *sql.Tx.
		q := invoicessql.New(svc.db).WithTx(pgstore.SQLTxFrom(ctx))
		return q.CreateInvoice(ctx, invoicessql.CreateInvoiceParams{Customer: in.Customer, AmountCents: in.AmountCents})
	}},
	{"GORM", func(ctx context.Context, _ service, in Invoice) (int64, error) {
		// GORM on the claim's *sql.Tx: no connection of its own. The
		// transaction is open already, so GORM's own around each write
		// is skipped.
		db, err := gorm.Open(postgres.New(postgres.Config{Conn: pgstore.SQLTxFrom(ctx)}),
			&gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard})
		if err != nil {
			return 0, err
		}
		err = db.WithContext(ctx).Create(&in).Error
		return in.ID, err
	}},
	{"sqlx", func(ctx context.Context, svc service, in Invoice) (int64, error) {
		// A sqlx.Tx over the claim's *sql.Tx. Made this way it has no
		// driver name, so named queries are bound with the PostgreSQL
		// bind type explicitly.
		sdb := sqlx.NewDb(svc.db, "pgx")
		tx := &sqlx.Tx{Tx: pgstore.SQLTxFrom(ctx), Mapper: sdb.Mapper}
		q, args, err := sqlx.BindNamed(sqlx.DOLLAR,
			`INSERT INTO invoices (customer, amount_cents) VALUES (:customer, :amount_cents) RETURNING id`, in)
		if err != nil {
			return 0, err
		}
		var id int64
		err = tx.GetContext(ctx, &id, q, args...)
		return id, err
	}},
	{"bun", func(ctx context.Context, svc service, in Invoice) (int64, error) {
		// bun's queries run on any bun.IConn, which the claim's *sql.Tx
		// is; the *bun.DB only gives the dialect.
		db := bun.NewDB(svc.db, pgdialect.New())
		_, err := db.NewInsert().Conn(pgstore.SQLTxFrom(ctx)).Model(&in).Returning("id").Exec(ctx)
		return in.ID, err
	}},
}

// handler creates the invoice in the request's body through insert and
// answers 201 with it. With the header Fail, it fails after the insert,
// answering 503: the claim's transaction rolls back, invoice and all.
func handler(svc service, insert insertFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in Invoice
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, "bad invoice", http.StatusBadRequest)
			return
		}
		id, err := insert(r.Context(), svc, in)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if r.Header.Get("Fail") != "" {
			http.Error(w, "failed after the insert", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "customer": in.Customer})
	})
}

func TestLayers(t *testing.T) {
	for _, l := range layers {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			testLayer(t, l.insert)
		})
	}
}

// newInvoices is a fresh schema, migrated, with the invoices table
// (schema.sql), and a store on it.
func newInvoices(t *testing.T) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	pool, _ := testdb.Pool(t)
	if err := migrations.Up(t.Context(), pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	schema, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), string(schema)); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return pool, store
}

func testLayer(t *testing.T, insert insertFunc) {
	ctx := t.Context()
	pool, store := newInvoices(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	svc := service{pool: pool, db: db}
	protect := middleware.New(store, middleware.Options{InTransaction: true, Engine: engine.Options{Wait: 30 * time.Second}})
	srv := httptest.NewServer(protect(handler(svc, insert)))
	t.Cleanup(srv.Close)

	post := func(key string, fail bool) (int, string, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"Customer":"acme","AmountCents":1200}`))
		req.Header.Set("Idempotency-Key", key)
		if fail {
			req.Header.Set("Fail", "1")
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return 0, "", ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(body)
	}
	invoices := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A retry is replayed: one invoice.
	status, _, first := post("order-1", false)
	if status != http.StatusCreated {
		t.Fatalf("first request: %d %s", status, first)
	}
	status, replayed, again := post("order-1", false)
	if status != http.StatusCreated || replayed != "true" || again != first {
		t.Errorf("retry: %d replayed=%q %s; want the first answer replayed: %s", status, replayed, again, first)
	}
	if n := invoices(); n != 1 {
		t.Errorf("%d invoices after a retry, want 1", n)
	}

	// A failure after the insert leaves nothing; the retry then runs.
	if status, _, body := post("order-2", true); status != http.StatusServiceUnavailable {
		t.Fatalf("failing request: %d %s", status, body)
	}
	if n := invoices(); n != 1 {
		t.Errorf("%d invoices after a failure, want 1: its insert rolled back", n)
	}
	if status, replayed, body := post("order-2", false); status != http.StatusCreated || replayed != "" {
		t.Errorf("retry after the failure: %d replayed=%q %s; want it run", status, replayed, body)
	}

	// 20 concurrent duplicates: one runs, every one gets its answer, one
	// invoice.
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers = map[string]int{}
	)
	for range 20 {
		wg.Go(func() {
			status, _, body := post("order-3", false)
			mu.Lock()
			answers[fmt.Sprint(status, " ", body)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(answers) != 1 {
		t.Errorf("20 duplicates got %d different answers: %v", len(answers), answers)
	}
	for a := range answers {
		if !strings.HasPrefix(a, "201 ") {
			t.Errorf("duplicates answered %q", a)
		}
	}
	if n := invoices(); n != 3 {
		t.Errorf("%d invoices after 20 duplicates, want 3", n)
	}
}
