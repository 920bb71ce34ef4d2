package middleware_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// BenchmarkOneCommit is a new key on the one-commit path, as idembench's
// demo-onetx mode sends it but without the HTTP client and server: the
// middleware with Options.InTransaction over pgstore, and a handler that
// inserts an invoice in the claim's transaction and answers 201 (the
// claim travels with the BEGIN, the key's row with the COMMIT: three round
// trips). "insert" is the same handler's insert in a transaction of its
// own, without the middleware: what a request costs without idem. Their
// allocs/op differ by what idem allocates per request. It needs
// TEST_DATABASE_URL:
//
//	go test -run '^$' -bench OneCommit -benchmem -count 3 ./middleware/
func BenchmarkOneCommit(b *testing.B) {
	const insert = `INSERT INTO invoices (customer, amount_cents) VALUES ($1, $2) RETURNING id`
	pool, _ := testdb.Pool(b)
	if err := migrations.Up(b.Context(), pool, migrations.Options{}); err != nil {
		b.Fatal(err)
	}
	// As idembench's store: the replay cache on, no sweeper (its
	// statements would be counted with the requests').
	store, err := pgstore.New(pool, pgstore.Options{ReplayCacheBytes: 64 << 20, SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(store.Close)
	if _, err := pool.Exec(b.Context(), `CREATE TABLE invoices (id bigserial PRIMARY KEY, customer text NOT NULL, amount_cents bigint NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	answer := overheadHandler()
	keys := 0 // every request of the run has a key of its own
	run := func(b *testing.B, h http.Handler) {
		w := &sinkWriter{h: http.Header{}}
		for b.Loop() {
			keys++
			clear(w.h)
			h.ServeHTTP(w, overheadRequest(`"onecommit-`+strconv.Itoa(keys)+`"`))
			if w.status != http.StatusCreated || w.h.Get(middleware.ReplayedHeader) != "" {
				b.Fatalf("status %d, replayed %q: the benchmark must time new keys", w.status, w.h.Get(middleware.ReplayedHeader))
			}
		}
	}
	b.Run("insert", func(b *testing.B) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			err := pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
				var id int64
				return tx.QueryRow(r.Context(), insert, "ACME", 12345).Scan(&id)
			})
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			answer.ServeHTTP(w, r)
		})
		b.ReportAllocs()
		run(b, h)
	})
	b.Run("idem", func(b *testing.B) {
		mw := middleware.New(store, middleware.Options{Engine: engine.Options{Owner: "bench"}, InTransaction: true})
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var id int64
			if err := pgstore.TxFrom(r.Context()).QueryRow(r.Context(), insert, "ACME", 12345).Scan(&id); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			answer.ServeHTTP(w, r)
		}))
		b.ReportAllocs()
		run(b, h)
	})
}
