package main

// The database every subcommand but scope works on: the connection, the
// table, and the errors that explain a first mistake.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgconnect"
	"github.com/idemkit/idem/internal/pgschema"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// connect opens a pool on the configured database and checks that it
// answers, turning pgx's errors into one clear line.
func (c *cli) connect(ctx context.Context) (*pgxpool.Pool, error) {
	url := c.databaseURL
	if url == "" {
		url = c.getenv("DATABASE_URL")
	}
	if url == "" {
		return nil, usagef("no database: set DATABASE_URL or pass --database-url " +
			"(e.g. postgres://idem:idem@127.0.0.1:5432/idem?sslmode=disable)")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef("the database URL is not a valid PostgreSQL URL or key=value DSN: %s", parseProblem(err))
	}
	cfg.MaxConns = 4
	return pgconnect.Open(ctx, cfg, 10*time.Second)
}

// parseProblem is what is wrong with a connection string, without the
// string itself (it may hold a password).
func parseProblem(err error) string {
	if u := errors.Unwrap(err); u != nil {
		return u.Error()
	}
	msg := err.Error()
	// pgx: "cannot parse `<redacted url>`: <problem>"
	if i := strings.Index(msg, "`: "); i >= 0 {
		return msg[i+3:]
	}
	return "malformed"
}

// tableError explains a missing table, the most common first mistake.
func (c *cli) tableError(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "42P01" { // undefined_table
		return fmt.Errorf("table %s does not exist: run \"idem migrate up\" first (or pass the right --table): %s", c.tableName(), pg.Message)
	}
	return err
}

// validateTable checks --table before anything connects.
func (c *cli) validateTable() error {
	if err := migrations.ValidateTable(c.table); err != nil {
		return usagef("--table %q: %s", c.table, pgschema.TableRule)
	}
	return nil
}

func (c *cli) tableName() string {
	if c.table == "" {
		return pgschema.DefaultTable
	}
	return c.table
}

// store opens the store on the configured database; closeStore closes the
// store and its pool.
func (c *cli) store(ctx context.Context) (s *pgstore.Store, closeStore func(), err error) {
	if err := c.validateTable(); err != nil {
		return nil, nil, err
	}
	pool, err := c.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	// No sweeper of the store's own: a command makes one call, and idem
	// sweep runs an idem.Sweeper it reports on.
	if s, err = pgstore.New(pool, pgstore.Options{Table: c.table, SweepInterval: -1}); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return s, func() { s.Close(); pool.Close() }, nil
}
