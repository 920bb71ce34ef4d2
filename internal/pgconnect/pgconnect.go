// Package pgconnect opens a pgx pool for the commands (the demo and the ops
// CLI) and turns a failure into one clear line, without the password and
// without pgx's whole error chain.
package pgconnect

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Open opens a pool with cfg and checks, within timeout, that the server
// answers. Its error names the server, user and database, and the problem.
func Open(ctx context.Context, cfg *pgxpool.Config, timeout time.Duration) (*pgxpool.Pool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cannot connect to PostgreSQL at %s (user %q, database %q): %s",
			net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)),
			cfg.ConnConfig.User, cfg.ConnConfig.Database, problem(err, timeout))
	}
	return pool, nil
}

// problem is the most useful part of a connection error, on one line: the
// server's message, or the network error.
func problem(err error, timeout time.Duration) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return fmt.Sprintf("%s (SQLSTATE %s)", pg.Message, pg.Code)
	}
	// pgx tries a host once per TLS fallback and joins the failures, so
	// the same lookup error comes back more than once: say it once.
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return fmt.Sprintf("cannot resolve host %q: %s", dns.Name, dns.Err)
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return oneLine(op.Err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %v", timeout)
	}
	return oneLine(err.Error())
}

// oneLine joins the distinct lines of a multi-line message with "; ",
// the first one ending in a colon joined with a space.
func oneLine(msg string) string {
	lines := strings.Split(msg, "\n")
	if len(lines) == 1 {
		return msg
	}
	var b strings.Builder
	seen := make(map[string]bool, len(lines))
	for i, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || seen[line] {
			continue
		}
		seen[line] = true
		switch {
		case i == 0:
		case strings.HasSuffix(b.String(), ":"):
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(line)
	}
	return b.String()
}
