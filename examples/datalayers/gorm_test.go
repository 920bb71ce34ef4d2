package datalayers_test

import (
	"errors"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
)

// TestGORMTransactionIsASavepoint: GORM on the claim's *sql.Tx makes its
// Transaction a savepoint, which the work may roll back; the claim's
// transaction commits the rest.
func TestGORMTransactionIsASavepoint(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, store := newInvoices(t)
	key, _ := idem.ParseClientKey("order-1")
	c, claim, err := store.BeginClaim(ctx, idem.ClaimRequest{Scope: "s", Key: key}, idem.TxLimits{Wait: time.Second})
	if err != nil || c.Status != idem.Acquired {
		t.Fatalf("BeginClaim: %+v, %v", c, err)
	}
	defer func() { _ = claim.Rollback(ctx) }()
	wctx := claim.Context(ctx)
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: pgstore.SQLTxFrom(wctx)}),
		&gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	db = db.WithContext(wctx)
	if err := db.Create(&Invoice{Customer: "kept", AmountCents: 1}).Error; err != nil {
		t.Fatal(err)
	}
	undone := errors.New("undone")
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Invoice{Customer: "dropped", AmountCents: 2}).Error; err != nil {
			return err
		}
		return undone
	})
	if !errors.Is(err, undone) {
		t.Fatalf("Transaction = %v, want its function's error", err)
	}
	if err := claim.Commit(ctx, idem.Result{Status: 201}); err != nil {
		t.Fatal(err)
	}
	var customers []string
	rows, err := pool.Query(ctx, `SELECT customer FROM invoices`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		_ = rows.Scan(&c)
		customers = append(customers, c)
	}
	if rows.Err() != nil || len(customers) != 1 || customers[0] != "kept" {
		t.Errorf("invoices %v, %v; want [kept]", customers, rows.Err())
	}
}
