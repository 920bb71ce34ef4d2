package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/cmdmain"
	"github.com/idemkit/idem/internal/pgconnect"
	"github.com/idemkit/idem/internal/pgschema"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// invoicesDDL is the demo's own table. It is not an idem migration: it stands
// for the application's business tables, which the application migrates
// however it likes.
const invoicesDDL = `CREATE TABLE IF NOT EXISTS idemdemo_invoices (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer     text   NOT NULL,
    amount_cents bigint NOT NULL CHECK (amount_cents > 0),
    created_at   timestamptz NOT NULL DEFAULT now()
)`

func newPostgresBackend(ctx context.Context, cfg config, logger *slog.Logger) (*backend, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.databaseURL)
	if err != nil {
		// pgx's message quotes the URL, password included: say only
		// what is wrong.
		return nil, cmdmain.Usagef("-database-url / DATABASE_URL is not a valid PostgreSQL URL or DSN (want postgres://user:password@host:port/db?sslmode=disable)")
	}
	pool, err := pgconnect.Open(ctx, pcfg, 15*time.Second)
	if err != nil {
		return nil, err
	}
	logger.Info("connected to PostgreSQL", "host", pcfg.ConnConfig.Host, "port", pcfg.ConnConfig.Port, "database", pcfg.ConnConfig.Database)
	// Behind a pooler in transaction mode, what needs a session (goose's
	// advisory lock, LISTEN) goes to PostgreSQL directly.
	var listenConfig *pgx.ConnConfig
	session := pool
	if cfg.directURL != "" {
		dcfg, err := pgxpool.ParseConfig(cfg.directURL)
		if err != nil {
			pool.Close()
			return nil, cmdmain.Usagef("-direct-url / IDEMDEMO_DIRECT_URL is not a valid PostgreSQL URL or DSN")
		}
		listenConfig = dcfg.ConnConfig.Copy()
		if cfg.migrate {
			dcfg.MaxConns = 1
			if session, err = pgconnect.Open(ctx, dcfg, 15*time.Second); err != nil {
				pool.Close()
				return nil, fmt.Errorf("direct connection: %w", err)
			}
			defer session.Close()
		}
	}
	if cfg.migrate {
		// Through session: directly to PostgreSQL behind a pooler.
		if err := migrate(ctx, session, cfg.table, logger); err != nil {
			pool.Close()
			return nil, err
		}
	} else {
		logger.Info("not migrating (-migrate=false): the idem table must exist", "table", tableName(cfg.table))
	}
	replayCache := cfg.replayCache
	if cfg.noListen && replayCache > 0 {
		logger.Info("replay cache off: without LISTEN it cannot hear a key forgotten on another instance")
		replayCache = 0
	}
	store, err := pgstore.New(pool, pgstore.Options{
		Table:        cfg.table,
		Lease:        cfg.lease,
		Retention:    cfg.retention,
		Logger:       logger,
		ListenConfig: listenConfig,
		NoListen:     cfg.noListen,
		// A replay is then answered without a round trip; a key
		// forgotten on any instance leaves every instance's cache.
		ReplayCacheBytes: replayCache,
		// The demo runs its own sweeper, to count what it removes.
		SweepInterval: -1,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &backend{
		name:     "postgres",
		store:    store,
		invoices: &pgInvoices{pool: pool, store: store, logger: logger},
		// The invoice is a row in the store's database: the claim, the
		// invoice and the response commit together (unless -two-phase).
		inTransaction: !cfg.twoPhase,
		health:        storeHealth(store),
		close: func() {
			store.Close()
			pool.Close()
		},
	}, nil
}

// migrate brings the idem table and the invoices table up to date and logs
// what it did: the migrations it found pending and applied, or that there
// was nothing to do. Replicas starting together are safe: Up serialises on
// an advisory lock (a migration another replica applied meanwhile is still
// listed as applied here), and CREATE TABLE IF NOT EXISTS is idempotent.
func migrate(ctx context.Context, pool *pgxpool.Pool, table string, logger *slog.Logger) error {
	opts := migrations.Options{Table: table, Logger: logger}
	before, err := migrations.Status(ctx, pool, opts)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var pending []string
	for _, m := range before {
		if m.State != migrations.MigrationApplied {
			pending = append(pending, strconv.FormatInt(m.Version, 10))
		}
	}
	if err := migrations.Up(ctx, pool, opts); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(pending) > 0 {
		logger.Info("migrated the idem table", "table", tableName(table), "applied", strings.Join(pending, ","))
	} else {
		logger.Info("idem table up to date; nothing to migrate", "table", tableName(table), "version", before[len(before)-1].Version)
	}
	var invoicesExisted bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('idemdemo_invoices') IS NOT NULL`).Scan(&invoicesExisted); err != nil {
		return fmt.Errorf("create the invoices table: %w", err)
	}
	if _, err := pool.Exec(ctx, invoicesDDL); err != nil {
		return fmt.Errorf("create the invoices table: %w", err)
	}
	if !invoicesExisted {
		logger.Info("created the invoices table", "table", "idemdemo_invoices")
	}
	return nil
}

func tableName(t string) string {
	if t == "" {
		return pgschema.DefaultTable
	}
	return t
}

// storeHealth checks that the store answers: one primary-key lookup in the
// idem table, so a missing table or missing privileges show as well as a
// database that is down.
func storeHealth(store *pgstore.Store) func(context.Context) error {
	key, err := idem.ParseClientKey("idemdemo-healthz")
	if err != nil {
		panic(err) // a constant, valid key
	}
	return func(ctx context.Context) error {
		_, _, err := store.Inspect(ctx, "idemdemo-healthz", key)
		return err
	}
}

// pgInvoices keeps invoices in PostgreSQL, in the database of the idem
// table, so that an invoice and the response that reports it commit in one
// transaction.
type pgInvoices struct {
	pool   *pgxpool.Pool
	store  *pgstore.Store
	logger *slog.Logger
}

// create inserts the invoice and answers 201 with it, the invoice and the
// recorded response committing in one transaction: a crash at any point
// leaves no invoice without its response, and a retry never creates a
// second invoice.
//
// By default (middleware.Options.InTransaction) the middleware claimed the
// key inside a transaction, which create finds in the request's context
// and inserts in; the middleware records the answer in it and commits: one
// commit for the claim, the invoice and the response, and nothing left
// behind by a crash. With -two-phase the claim committed on its own first,
// and create inserts the invoice and records the response in a transaction
// of its own (middleware.Commit with pgstore's CompleteTx), as a handler
// must that manages its own transaction.
func (p *pgInvoices) create(w http.ResponseWriter, r *http.Request, req invoiceRequest) {
	ctx := r.Context()
	inv := Invoice{Customer: req.Customer, AmountCents: req.AmountCents}
	if tx := pgstore.TxFrom(ctx); tx != nil {
		if err := insertInvoice(ctx, tx, &inv); err != nil {
			// A 5xx rolls the transaction back: nothing of the request
			// is left, and a retry runs again.
			p.unavailable(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(invoiceJSON(inv))
		return
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		p.unavailable(w, err)
		return
	}
	// After a commit this is a no-op. It must run even if the request was
	// cancelled, so it gets a context of its own.
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := insertInvoice(ctx, tx, &inv); err != nil {
		p.unavailable(w, err)
		return
	}
	hdr := http.Header{"Content-Type": {"application/json"}}
	err = middleware.Commit(w, r, http.StatusCreated, hdr, invoiceJSON(inv),
		func(ctx context.Context, tok idem.Token, res idem.Result) error {
			if err := p.store.CompleteTx(ctx, tx, tok, res); err != nil {
				return err
			}
			return tx.Commit(ctx)
		})
	switch {
	case err == nil:
	case errors.Is(err, middleware.ErrNoClaim):
		// Not reached in the demo (every POST needs a key), but a handler
		// must still work unprotected: commit and answer.
		if err := tx.Commit(ctx); err != nil {
			p.unavailable(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, inv)
	default:
		// Commit answered 503 and the middleware releases the claim.
		p.logger.Warn("invoice not created: the transaction did not commit", "err", err)
	}
}

func insertInvoice(ctx context.Context, tx pgx.Tx, inv *Invoice) error {
	return tx.QueryRow(ctx, `INSERT INTO idemdemo_invoices (customer, amount_cents) VALUES ($1, $2) RETURNING id`,
		inv.Customer, inv.AmountCents).Scan(&inv.ID)
}

func (p *pgInvoices) unavailable(w http.ResponseWriter, err error) {
	p.logger.Warn("invoice not created: database error", "err", err)
	// A 5xx releases the claim, so the retry runs again: say when.
	w.Header().Set("Retry-After", "1")
	writeProblem(w, http.StatusServiceUnavailable, "Database unavailable",
		"The invoice could not be created. Retry with the same Idempotency-Key.")
}

func (p *pgInvoices) list(ctx context.Context) ([]Invoice, error) {
	rows, err := p.pool.Query(ctx, `SELECT id, customer, amount_cents FROM idemdemo_invoices ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Invoice, error) {
		var inv Invoice
		err := row.Scan(&inv.ID, &inv.Customer, &inv.AmountCents)
		return inv, err
	})
}
