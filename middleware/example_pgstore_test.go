package middleware_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// A service on PostgreSQL: the schema is migrated at start, the middleware is
// mounted on the routes of an http.ServeMux, and the handler creates its
// invoice and records its response in one transaction with Commit, so the
// invoice exists exactly when its response can be replayed.
//
// It needs a database (DATABASE_URL); TestExampleCommit runs it on a fresh
// schema and checks what it prints.
func ExampleCommit() {
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

	protect := middleware.New(store, middleware.Options{Principal: userOf})
	mux := http.NewServeMux()
	mux.Handle("POST /invoices", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Customer    string `json:"customer"`
			AmountCents int64  `json:"amount_cents"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, "bad invoice", http.StatusBadRequest) // recorded and replayed
			return
		}
		tx, err := pool.Begin(r.Context())
		if err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable) // released: a retry runs again
			return
		}
		defer tx.Rollback(context.WithoutCancel(r.Context())) // no-op after Commit
		var id int64
		err = tx.QueryRow(r.Context(),
			`INSERT INTO invoices (customer, amount_cents) VALUES ($1, $2) RETURNING id`,
			in.Customer, in.AmountCents).Scan(&id)
		if err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		body, _ := json.Marshal(map[string]any{"id": id, "customer": in.Customer, "amount_cents": in.AmountCents})
		header := http.Header{"Content-Type": {"application/json"}}
		err = middleware.Commit(w, r, http.StatusCreated, header, body,
			func(ctx context.Context, tok idem.Token, res idem.Result) error {
				if err := store.CompleteTx(ctx, tx, tok, res); err != nil {
					return err // stale: the key is no longer ours; nothing commits
				}
				return tx.Commit(ctx)
			})
		if err != nil {
			// Commit answered 503 and the key is released; the
			// invoice was rolled back. Just log.
			log.Printf("create invoice: %v", err)
		}
	})))
	srv := httptest.NewServer(mux) // in production: http.ListenAndServe(addr, mux)
	defer srv.Close()

	for range 2 { // the client retries
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/invoices", strings.NewReader(`{"customer":"acme","amount_cents":1200}`))
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
	}
	var invoices int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&invoices); err != nil {
		log.Fatal(err)
	}
	fmt.Println("invoices:", invoices)
	// Prints:
	// 201 replayed="" {"amount_cents":1200,"customer":"acme","id":1}
	// 201 replayed="true" {"amount_cents":1200,"customer":"acme","id":1}
	// invoices: 1
}

func TestExampleCommit(t *testing.T) {
	testdb.RunExample(t, "example_pgstore_test.go", "ExampleCommit", ExampleCommit)
}

// A handler whose side effect is a row in the store's database claims its
// key in the transaction that writes the row (Options.InTransaction): the
// claim, the invoice and the recorded response commit in one commit, or, if
// the handler fails, panics or the process dies, none of them does and a
// retry runs at once. The handler writes its response as usual; the
// middleware holds it back until the commit.
//
// It needs a database (DATABASE_URL); TestExampleOptions_inTransaction runs
// it on a fresh schema and checks what it prints.
func ExampleOptions_inTransaction() {
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

	protect := middleware.New(store, middleware.Options{InTransaction: true, Principal: userOf})
	mux := http.NewServeMux()
	mux.Handle("POST /invoices", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Customer    string `json:"customer"`
			AmountCents int64  `json:"amount_cents"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, "bad invoice", http.StatusBadRequest) // recorded and replayed
			return
		}
		var id int64
		err := pgstore.TxFrom(r.Context()).QueryRow(r.Context(),
			`INSERT INTO invoices (customer, amount_cents) VALUES ($1, $2) RETURNING id`,
			in.Customer, in.AmountCents).Scan(&id)
		if err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable) // rolled back: a retry runs again
			return
		}
		body, _ := json.Marshal(map[string]any{"id": id, "customer": in.Customer, "amount_cents": in.AmountCents})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})))
	srv := httptest.NewServer(mux) // in production: http.ListenAndServe(addr, mux)
	defer srv.Close()

	for range 2 { // the client retries
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/invoices", strings.NewReader(`{"customer":"acme","amount_cents":1200}`))
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
	}
	var invoices int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&invoices); err != nil {
		log.Fatal(err)
	}
	fmt.Println("invoices:", invoices)
	// Prints:
	// 201 replayed="" {"amount_cents":1200,"customer":"acme","id":1}
	// 201 replayed="true" {"amount_cents":1200,"customer":"acme","id":1}
	// invoices: 1
}

func TestExampleOptions_inTransaction(t *testing.T) {
	testdb.RunExample(t, "example_pgstore_test.go", "ExampleOptions_inTransaction", ExampleOptions_inTransaction)
}
