package pgstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// Creating an invoice exactly once: the invoice row and the recorded result
// commit in one transaction, and a retry with the same key replays the
// result instead of creating a second invoice.
//
// It needs a database (DATABASE_URL), so it has no Output comment;
// TestExample runs it against TEST_DATABASE_URL and checks what it prints.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS invoices (
		id bigserial PRIMARY KEY, customer text NOT NULL, amount_cents bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	createInvoice := func(idempotencyKey, customer string, amountCents int64) (idem.Result, error) {
		key, err := idem.ParseClientKey(idempotencyKey)
		if err != nil {
			return idem.Result{}, err
		}
		claim, err := store.Claim(ctx, idem.ClaimRequest{Scope: "tenant-1", Key: key, Fingerprint: fmt.Sprintf("POST /invoices %s %d", customer, amountCents)})
		if err != nil {
			return idem.Result{}, err // a mismatch, or the store is unavailable
		}
		switch claim.Status {
		case idem.Completed:
			return claim.Result, nil // a retry: replay
		case idem.InFlight:
			return idem.Result{Status: 409}, nil // the original is still running
		}
		var res idem.Result
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var id int64
			if err := tx.QueryRow(ctx, `INSERT INTO invoices (customer, amount_cents) VALUES ($1, $2) RETURNING id`,
				customer, amountCents).Scan(&id); err != nil {
				return err
			}
			res = idem.Result{Status: 201, Body: fmt.Appendf(nil, `{"id":%d,"customer":%q,"amount_cents":%d}`, id, customer, amountCents)}
			return store.CompleteTx(ctx, tx, claim.Token, res)
		})
		if err != nil {
			// Nothing committed: give the key back so that a retry runs.
			_ = store.Release(ctx, claim.Token)
			return idem.Result{}, err
		}
		return res, nil
	}

	for range 2 { // the client retries
		res, err := createInvoice("order-42", "acme", 1200)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Status, string(res.Body))
	}
	var invoices int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&invoices); err != nil {
		log.Fatal(err)
	}
	fmt.Println("invoices:", invoices)
	// Prints:
	// 201 {"id":1,"customer":"acme","amount_cents":1200}
	// 201 {"id":1,"customer":"acme","amount_cents":1200}
	// invoices: 1
}

// TestExample runs Example on a fresh schema and checks what it prints.
func TestExample(t *testing.T) {
	testdb.RunExample(t, "example_test.go", "Example", Example)
}

// Work written against database/sql, in the transaction its claim was
// taken in: the invoice, the claim and the recorded result commit
// together, and a retry replays the result.
//
// It needs a database (DATABASE_URL), so it has no Output comment;
// TestExampleSQLTxFrom runs it and checks what it prints.
func ExampleSQLTxFrom() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS invoices (
		id bigserial PRIMARY KEY, customer text NOT NULL, amount_cents bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	// insert is the work, on database/sql.
	insert := func(ctx context.Context, tx *sql.Tx) (idem.Result, error) {
		var id int64
		err := tx.QueryRowContext(ctx, `INSERT INTO invoices (customer, amount_cents) VALUES ($1, $2) RETURNING id`,
			"acme", 1200).Scan(&id)
		return idem.Result{Status: 201, Body: fmt.Appendf(nil, `{"id":%d}`, id)}, err
	}

	key, _ := idem.ParseClientKey("order-42")
	for range 2 { // the client retries
		c, claim, err := store.BeginClaim(ctx, idem.ClaimRequest{Scope: "tenant-1", Key: key}, idem.TxLimits{Wait: 5 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		if c.Status == idem.Completed {
			fmt.Println("replayed:", c.Result.Status, string(c.Result.Body))
			continue
		}
		wctx := claim.Context(ctx)
		res, err := insert(wctx, pgstore.SQLTxFrom(wctx))
		if err != nil {
			_ = claim.Rollback(ctx) // nothing is left
			log.Fatal(err)
		}
		if err := claim.Commit(ctx, res); err != nil {
			log.Fatal(err)
		}
		fmt.Println("created:", res.Status, string(res.Body))
	}
	// Prints:
	// created: 201 {"id":1}
	// replayed: 201 {"id":1}
}

// TestExampleSQLTxFrom runs ExampleSQLTxFrom on a fresh schema and checks
// what it prints.
func TestExampleSQLTxFrom(t *testing.T) {
	testdb.RunExample(t, "example_test.go", "ExampleSQLTxFrom", ExampleSQLTxFrom)
}
