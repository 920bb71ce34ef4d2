// Package testdb gives tests a real PostgreSQL: a fresh schema per test in
// one database, found in this order:
//
//  1. TEST_DATABASE_URL, when set;
//  2. else a PostgreSQL container, started the first time a test asks for
//     the database and removed when the test binary ends (see [Main]): one
//     container per test binary, from IDEM_TEST_POSTGRES_IMAGE (default
//     [DefaultImage]), through testcontainers-go's postgres module;
//  3. else, with no Docker engine either (or IDEM_TEST_CONTAINERS=0, which
//     says not to use one), the test is skipped on a developer's machine
//     and fails when CI is set: in CI a missing database must fail the
//     run, never skip it.
//
// Private servers ([StartServer]) that a test stops, crashes and restarts
// are containers too when a Docker engine answers, else PostgreSQL's
// binaries run as local processes.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SkipReason starts every skip message of a test that found no database,
// so that a summary (`make test`) can count them.
const SkipReason = "no PostgreSQL"

// URL returns the URL of the tests' database (see the package doc): the
// same for every test of the binary. Without one, t is skipped, or fails
// when CI is set.
func URL(t testing.TB) string {
	t.Helper()
	if url := os.Getenv("TEST_DATABASE_URL"); url != "" {
		return url
	}
	url, err := sharedURL()
	if err != nil {
		unavailable(t, err)
	}
	return url
}

// unavailable skips t (fails it in CI) when err says there is no Docker
// engine, and fails it for any other error: a container that does not
// start is a failure, not a missing database.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, errNoDocker) {
		t.Fatalf("testdb: %v", err)
	}
	msg := SkipReason + ": TEST_DATABASE_URL is not set and " + err.Error() + " (see README, Testing)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI needs a database (see .ci/run)")
	}
	t.Skip(msg)
}

// Schema creates a new, empty schema for t, dropped when t ends, and returns
// its name.
func Schema(t testing.TB) string {
	t.Helper()
	url := URL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("testdb: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("testdb: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("testdb: connect for cleanup: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("testdb: drop schema: %v", err)
		}
	})
	return schema
}

// Config returns a pool configuration for TEST_DATABASE_URL whose
// connections use schema as their search_path.
func Config(t testing.TB, schema string) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatalf("testdb: parse TEST_DATABASE_URL: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if mode := os.Getenv("TEST_QUERY_EXEC_MODE"); mode != "" {
		m, ok := queryExecModes[mode]
		if !ok {
			t.Fatalf("testdb: TEST_QUERY_EXEC_MODE=%q: want one of cache_statement, cache_describe, describe_exec, exec, simple_protocol", mode)
		}
		cfg.ConnConfig.DefaultQueryExecMode = m
	}
	return cfg
}

// queryExecModes are pgx's query exec modes by the names of its
// default_query_exec_mode connection parameter. TEST_QUERY_EXEC_MODE sets
// one for every pool [Config] makes, so that a suite can be run the way
// poolers in transaction mode need (exec, simple_protocol).
var queryExecModes = map[string]pgx.QueryExecMode{
	"cache_statement": pgx.QueryExecModeCacheStatement,
	"cache_describe":  pgx.QueryExecModeCacheDescribe,
	"describe_exec":   pgx.QueryExecModeDescribeExec,
	"exec":            pgx.QueryExecModeExec,
	"simple_protocol": pgx.QueryExecModeSimpleProtocol,
}

// Pool returns a pool on a fresh schema (see [Schema]), closed when t ends.
func Pool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	schema := Schema(t)
	return NewPool(t, Config(t, schema)), schema
}

// NewPool opens a pool with cfg, closed when t ends.
func NewPool(t testing.TB, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testdb: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
