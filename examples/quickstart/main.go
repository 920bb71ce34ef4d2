// Command quickstart is a payments API shaped for production: retries of POST
// /payments with one Idempotency-Key pay once (claim, row and answer commit together).
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

type userKey struct{} // your authentication middleware, run before idem's, stores the user under it

func main() {
	if os.Getenv("DATABASE_URL") == "" {
		log.Fatal("DATABASE_URL is not set; e.g. postgres://idem:idem@127.0.0.1:5432/idem?sslmode=disable")
	}
	// SIGTERM is how Kubernetes and Docker stop a container.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err == nil {
		err = migrations.Up(ctx, pool, migrations.Options{Logger: slog.Default()}) // safe when replicas start together
	}
	if err == nil {
		_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS payments (id bigserial PRIMARY KEY)`)
	}
	var store *pgstore.Store
	if err == nil {
		store, err = pgstore.New(pool, pgstore.Options{Logger: slog.Default()}) // sweeps expired keys until Close
	}
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	defer store.Close()
	secret := []byte(os.Getenv("IDEM_SCOPE_SECRET")) // the same in every instance: openssl rand -hex 32
	if len(secret) == 0 {
		slog.Warn("IDEM_SCOPE_SECRET is not set: credentials are hashed into scopes without a key")
	}
	protect := middleware.New(store, middleware.Options{
		InTransaction: true, // the payment row commits with the claim and the answer
		// Who is asking: the user, who stays the same when a token is refreshed.
		Principal:   func(r *http.Request) string { user, _ := r.Context().Value(userKey{}).(string); return user },
		ScopeSecret: secret,
	})
	http.Handle("POST /payments", protect(http.HandlerFunc(createPayment)))
	srv := &http.Server{Addr: cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8080"), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}()
	log.Printf("listening on http://%s", srv.Addr)
	<-ctx.Done()
	_ = srv.Shutdown(context.Background()) // running requests finish first
}

func createPayment(w http.ResponseWriter, r *http.Request) {
	var id int64 // a 5xx, a panic or a crash rolls the payment back with the claim
	if err := pgstore.TxFrom(r.Context()).QueryRow(r.Context(), `INSERT INTO payments DEFAULT VALUES RETURNING id`).Scan(&id); err != nil {
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "payment %d\n", id)
}
