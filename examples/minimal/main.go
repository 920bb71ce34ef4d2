package main

import (
	"context"
	"log"
	"log/slog"
	"net/http"
	"os"

	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err == nil {
		err = migrations.Up(context.Background(), pool, migrations.Options{Logger: slog.Default()})
	}
	if err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Options{Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	protect := middleware.New(store, middleware.Options{
		Principal: func(r *http.Request) string { return r.Header.Get("X-Forwarded-User") }, // from your auth proxy
	})
	http.Handle("POST /orders", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.Print("placing an order") // the side effect: once per key
	})))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", nil))
}
