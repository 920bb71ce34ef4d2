// Command quickstart is a payments API protected by idem: a retried POST
// /payments with the same Idempotency-Key creates one payment and gets the
// first answer back. The key's claim, the payment row and the recorded
// answer commit in one transaction, so it is exactly once, for one commit.
//
//	export DATABASE_URL='postgres://idem:idem@127.0.0.1:5432/idem?sslmode=disable'
//	go run .    # listens on $ADDR (host:port), else :$PORT, else 127.0.0.1:8080
//	curl -si -X POST 127.0.0.1:8080/payments -H 'Idempotency-Key: pay-1' -d '{"amount_cents": 1200}'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// paymentsDDL is the application's own table; idem's comes from migrations.Up.
const paymentsDDL = `CREATE TABLE IF NOT EXISTS payments (
	id           bigserial PRIMARY KEY,
	amount_cents bigint NOT NULL CHECK (amount_cents > 0),
	created_at   timestamptz NOT NULL DEFAULT now()
)`

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is not set; e.g. export DATABASE_URL='postgres://idem:idem@127.0.0.1:5432/idem?sslmode=disable'")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	handler, shutdown, err := setup(ctx, url)
	if err != nil {
		return err
	}
	defer shutdown()
	ln, err := net.Listen("tcp", listenAddr())
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	log.Printf("listening on http://%s", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listenAddr is where the API listens: $ADDR (host:port), else every
// interface on $PORT (what platforms that set PORT expect), else
// 127.0.0.1:8080.
func listenAddr() string {
	if addr := os.Getenv("ADDR"); addr != "" {
		return addr
	}
	if port := os.Getenv("PORT"); port != "" {
		return ":" + port
	}
	return "127.0.0.1:8080"
}

// setup migrates, opens the store, and returns the API. shutdown closes
// the store and the pool.
func setup(ctx context.Context, databaseURL string) (handler http.Handler, shutdown func(), err error) {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, nil, err
	}
	// Safe when several replicas start at once (an advisory lock).
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		pool.Close()
		return nil, nil, err
	}
	if _, err := pool.Exec(ctx, paymentsDDL); err != nil {
		pool.Close()
		return nil, nil, err
	}
	// Lease 30s, retention 24h; the store sweeps abandoned claims and
	// expired results until Close.
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}

	protect := middleware.New(store, middleware.Options{
		// The handler's side effect is a row in this database: claim the
		// key in the transaction that writes it.
		InTransaction: true,
		// Who is asking: your session cookie (or Principal: the user your
		// auth middleware put in the context). See "Security".
		SessionCookies: []string{"session"},
		ScopeSecret:    []byte(os.Getenv("IDEM_SCOPE_SECRET")), // HMAC key of the scope hash
	})
	mux := http.NewServeMux()
	mux.Handle("POST /payments", protect(http.HandlerFunc(createPayment)))
	return mux, func() {
		store.Close()
		pool.Close()
	}, nil
}

// createPayment inserts a payment in the transaction the middleware claimed
// the key in, and answers. The middleware records the answer in the same
// transaction and commits: the payment and its answer commit together, or
// (a 5xx, a panic, a crash) neither does and a retry runs again.
func createPayment(w http.ResponseWriter, r *http.Request) {
	var in struct {
		AmountCents int64 `json:"amount_cents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.AmountCents <= 0 {
		http.Error(w, `want {"amount_cents": n}, n > 0`, http.StatusBadRequest) // 4xx: recorded
		return
	}
	var id int64
	err := pgstore.TxFrom(r.Context()).QueryRow(r.Context(),
		`INSERT INTO payments (amount_cents) VALUES ($1) RETURNING id`, in.AmountCents).Scan(&id)
	if err != nil {
		http.Error(w, "try again", http.StatusServiceUnavailable) // 5xx: rolled back
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "amount_cents": in.AmountCents})
}
