package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/pgstore"
)

// floorSQL is the database work of a first request done without idem: the
// floor the unique and demo modes are compared with. The statements write
// the same rows to the same table (same indexes) as pgstore does, in the
// same number of statements and commits, but with no function, no CTE
// reading the row first, and no NOTIFY. The completion names the claim's
// state as pgstore does ("state <> 'completed'"), so that both find the
// row by the primary key (see migration 3).
type floorSQL struct {
	claim, complete, createInvoices, insertInvoice string
	// insertKey is the key's row in its final state, with its answer
	// (http-minimum).
	insertKey string
}

func newFloorSQL(table string) floorSQL {
	invoices := table + "_invoices"
	return floorSQL{
		claim: `INSERT INTO ` + table + ` (scope, key, generation, state, fingerprint, owner, lease_end, created_at)
VALUES ($1, $2, nextval('` + table + `_generation_seq'), 'claimed', $3, 'idembench', now() + interval '5 minutes', now())
ON CONFLICT (scope, key) DO NOTHING RETURNING generation`,
		complete: `UPDATE ` + table + `
   SET state = 'completed', result = $4::jsonb, lease_end = NULL, completed_at = now(), expires_at = now() + interval '1 day'
 WHERE scope = $1 AND key = $2 AND generation = $3 AND state <> 'completed'`,
		createInvoices: `CREATE TABLE IF NOT EXISTS ` + invoices + ` (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer     text   NOT NULL,
    amount_cents bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now())`,
		insertInvoice: `INSERT INTO ` + invoices + ` (customer, amount_cents) VALUES ($1, $2) RETURNING id`,
		insertKey: `INSERT INTO ` + table + ` (scope, key, generation, state, fingerprint, owner, result, created_at, completed_at, expires_at)
VALUES ($1, $2, nextval('` + table + `_generation_seq'), 'completed', $3, 'idembench', $4::jsonb, now(), now(), now() + interval '1 day')`,
	}
}

// recordedJSON is recordedResult as the floor stores it.
var recordedJSON = func() string {
	b, err := recordedResult.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// floorWork is the database work of a first request for key without idem:
// a plain INSERT of the claim and a plain UPDATE completing it, two
// autocommit statements (floor); with invoice, the completion is a
// transaction that first inserts an invoice (demo-floor: the demo's
// database work, claim then BEGIN; INSERT invoice; UPDATE; COMMIT).
func floorWork(ctx context.Context, pool *pgxpool.Pool, fsql floorSQL, key string, invoice bool) error {
	scope := []byte("idembench")
	var gen int64
	if err := pool.QueryRow(ctx, fsql.claim, scope, key, benchFingerprint).Scan(&gen); err != nil {
		return fmt.Errorf("floor claim: %w", err)
	}
	if !invoice {
		_, err := pool.Exec(ctx, fsql.complete, scope, key, gen, recordedJSON)
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, fsql.insertInvoice, "ACME", 12345).Scan(&id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fsql.complete, scope, key, gen, recordedJSON)
		return err
	})
}

// floorOp runs floorWork for a new key, called directly (floor,
// demo-floor).
func (b *bench) floorOp(invoice bool) op {
	mode := modeFloor
	if invoice {
		mode = modeDemoFloor
	}
	return func(ctx context.Context, w *worker) error {
		return floorWork(ctx, b.pool, b.sql, "key/"+b.newKey(mode, w), invoice)
	}
}

// insertWork is the invoice alone, without idempotency: BEGIN; INSERT
// invoice; COMMIT (http-insert). It is what every invoice mode is compared
// with: what the service costs without idem.
func insertWork(ctx context.Context, pool *pgxpool.Pool, fsql floorSQL) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var id int64
		return tx.QueryRow(ctx, fsql.insertInvoice, "ACME", 12345).Scan(&id)
	})
}

// onetxFloorWork is the database work of a new key claimed inside the
// business transaction, without idem (http-onetx-floor): the plain claim
// INSERT travelling with the BEGIN, the invoice, and the plain completion
// UPDATE travelling with the COMMIT, so the same round trips as
// demo-onetx's (and as insertWork's) with the plainest SQL: no bounds, no
// restore, no guard, no existing-row check.
func onetxFloorWork(ctx context.Context, pool *pgxpool.Pool, fsql floorSQL, key string) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer func() {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "rollback")
		}
	}()
	scope := []byte("idembench")
	begin := &pgx.Batch{}
	begin.BeginTx(pgx.TxOptions{})
	begin.Queue(fsql.claim, scope, key, benchFingerprint)
	br := conn.SendBatch(ctx, begin)
	var gen int64
	if _, err = br.Exec(); err == nil {
		err = br.QueryRow().Scan(&gen)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	var id int64
	if err := conn.QueryRow(ctx, fsql.insertInvoice, "ACME", 12345).Scan(&id); err != nil {
		return err
	}
	end := &pgx.Batch{}
	end.Queue(fsql.complete, scope, key, gen, recordedJSON)
	end.Queue("commit")
	return conn.SendBatch(ctx, end).Close()
}

// minimumWork is the bare minimum of any durable dedupe, by hand
// (http-minimum): the invoice and one key row holding its answer, in one
// transaction, with the round trips of the invoice alone: BEGIN and the
// invoice, then the key's row, in its final state, sent with the COMMIT.
// No claim, no bounds, no look at the key.
func minimumWork(ctx context.Context, pool *pgxpool.Pool, fsql floorSQL, key string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	defer func() {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "rollback")
		}
	}()
	begin := &pgx.Batch{}
	begin.BeginTx(pgx.TxOptions{})
	begin.Queue(fsql.insertInvoice, "ACME", 12345)
	br := conn.SendBatch(ctx, begin)
	var id int64
	if _, err = br.Exec(); err == nil {
		err = br.QueryRow().Scan(&id)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	end := &pgx.Batch{}
	end.Queue(fsql.insertKey, []byte("idembench"), key, benchFingerprint, recordedJSON)
	end.Queue("commit")
	return conn.SendBatch(ctx, end).Close()
}

// workHandler is a floor behind HTTP (http-floor, http-demo-floor,
// http-insert, http-onetx-floor, http-minimum): work for the request's Idempotency-Key,
// then handler's answer, in the same server and through the same client as
// unique and demo, without idem. Compared with it, unique and demo show
// what idem costs; compared with floor, what idem and HTTP cost together.
func workHandler(work func(ctx context.Context, key string) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := "key/" + strings.Trim(r.Header.Get("Idempotency-Key"), `"`)
		if err := work(r.Context(), key); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		handler(w, r)
	})
}

// demoHandler is the demo's POST /invoices, shaped for the benchmark: it
// inserts an invoice and records the response in the same transaction
// (middleware.Commit with pgstore's CompleteTx), as the two-phase path
// does, and answers with handler's body so that every mode's answer is
// checked alike.
func demoHandler(pool *pgxpool.Pool, store *pgstore.Store, fsql floorSQL) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		ctx := r.Context()
		tx, err := pool.Begin(ctx)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}()
		var id int64
		if err := tx.QueryRow(ctx, fsql.insertInvoice, "ACME", 12345).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		hdr := http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(responseBody))}}
		err = middleware.Commit(w, r, http.StatusCreated, hdr, []byte(responseBody),
			func(ctx context.Context, tok idem.Token, res idem.Result) error {
				if err := store.CompleteTx(ctx, tx, tok, res); err != nil {
					return err
				}
				return tx.Commit(ctx)
			})
		if errors.Is(err, middleware.ErrNoClaim) {
			http.Error(w, "no claim", http.StatusInternalServerError)
		}
	})
}

// demoTxHandler is cmd/idemdemo's POST /invoices, shaped for the benchmark
// (demo-onetx): behind the middleware with Options.InTransaction, it
// inserts the invoice in the claim's transaction and answers; the
// middleware records the answer in that transaction and commits it.
func demoTxHandler(fsql floorSQL) http.Handler {
	return claimTxHandler(func(r *http.Request) (rowScanner, bool) {
		tx := pgstore.TxFrom(r.Context())
		if tx == nil {
			return nil, false
		}
		return tx.QueryRow(r.Context(), fsql.insertInvoice, "ACME", 12345), true
	})
}

// demoSQLTxHandler is demoTxHandler through database/sql
// (demo-onetx-sql): the invoice is inserted through the claim's *sql.Tx
// (pgstore.SQLTxFrom), on the same connection.
func demoSQLTxHandler(fsql floorSQL) http.Handler {
	return claimTxHandler(func(r *http.Request) (rowScanner, bool) {
		tx := pgstore.SQLTxFrom(r.Context())
		if tx == nil {
			return nil, false
		}
		return tx.QueryRowContext(r.Context(), fsql.insertInvoice, "ACME", 12345), true
	})
}

// rowScanner is the row of an INSERT … RETURNING: pgx.Row or *sql.Row.
type rowScanner interface{ Scan(dest ...any) error }

// claimTxHandler answers after insert's row, sent in the claim's
// transaction, returned its id; insert reports false when the request has
// no claim's transaction.
func claimTxHandler(insert func(r *http.Request) (rowScanner, bool)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		row, ok := insert(r)
		if !ok {
			http.Error(w, "no claim", http.StatusInternalServerError)
			return
		}
		var id int64
		if err := row.Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		handler(w, r)
	})
}
