// Package testdb gives tests a real PostgreSQL: a fresh schema per test in
// one database, found in this order:
//
//  1. TEST_DATABASE_URL, when set: the developer's own PostgreSQL, and then
//     no container engine is asked at all (see [ErrContainersOff]);
//  2. else a PostgreSQL container, started the first time a test asks for
//     the database and removed when the test binary ends: one container per
//     test binary, from IDEM_TEST_POSTGRES_IMAGE (default [DefaultImage]),
//     in a binary whose TestMain passes a [Containers] to [MainWith];
//  3. else (no Docker engine, IDEM_TEST_CONTAINERS=0, or a binary with no
//     Containers) the test is skipped on a developer's machine and fails
//     when CI is set: in CI a missing database must fail the run, never
//     skip it. (`make test` avoids this case: without TEST_DATABASE_URL
//     and without Docker it starts a PostgreSQL of its own from local
//     binaries and sets TEST_DATABASE_URL; see scripts/test.sh.)
//
// Private servers ([StartServer]) that a test stops, crashes and restarts
// are containers too in a binary with Containers when the run uses
// containers (no TEST_DATABASE_URL) and a Docker engine answers, else
// PostgreSQL's binaries run as local processes. The few tests that check
// containers themselves call [RequireContainers], which skips them, with
// the reason, in a run without containers.
//
// # Containers, and why the library's module has none
//
// This package is in idem's root module, the one a service adds to its
// go.mod. With Go's module graph pruning, every module that go.mod lists
// is in the graph of every service that requires idem, test-only ones
// included; a root test that imported testcontainers-go would put it,
// moby's client and their dependencies (23 modules) into every user's
// graph (scripts/check/modules.sh fails on it). So this package only defines the small [Containers]
// interface, and the integration module implements it with
// testcontainers-go (integration/internal/pgcontainer), whose TestMains
// pass it to [MainWith] (pgcontainer.Main). The root module's tests, and
// those of the other modules that are not integration's (the commands,
// mcphttp, idemotel, idemprom), have no Containers: `make test`
// (scripts/test.sh) starts one container for them all through the same
// implementation (integration/cmd/testpostgres) and sets
// TEST_DATABASE_URL, and their private servers run local binaries (in CI,
// Debian's PostgreSQL 15; without any, a test that needs one fails in CI).
// Driving the docker command instead of a Go client would have kept
// everything here with no dependency at all, at the price of parsing the
// CLI's output, waiting for readiness and handling the engine's API
// version by hand, and of tests that need a docker binary beside the
// engine; testcontainers-go already does that well, so the integration
// module keeps it.
//
// # Through a connection pooler
//
// When TEST_POOLER_URL is set too, it is a transaction-mode pooler in front
// of the same database (scripts/pgbouncer.sh starts one), and the pools of
// [Config] connect through it. A pooler in transaction mode hands each
// transaction any server connection, so no session setting survives, not
// even a search_path sent at connect time (PgBouncer refuses it as a
// startup parameter). The schema of a test is therefore found by its role:
// [Schema] also creates a role named like the schema, and PostgreSQL's
// default search_path ("$user", public) puts that schema first for it.
// [DirectConfig] and [ListenConfig] reach PostgreSQL directly, for what
// needs a session: migrations (goose's advisory lock) and LISTEN.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ClockSlack is how far short of a PostgreSQL timeout (lock_timeout,
// statement_timeout) a wait it ends may measure on Go's monotonic clock.
// PostgreSQL times them on the wall clock, which NTP may slew by up to
// 500 ppm (0.75 ms in 1.5 s): a test asserting that a wait was not cut
// short allows this much.
const ClockSlack = 5 * time.Millisecond

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
// engine or no container may be used, and fails it for any other error: a
// container that does not start is a failure, not a missing database.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, ErrNoDocker) && !errors.Is(err, ErrContainersOff) {
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
	if PoolerURL() != "" {
		// The test's role, for connections through the pooler; a
		// superuser like TEST_DATABASE_URL's, since the tests signal
		// and inspect other backends.
		var pw [12]byte
		_, _ = rand.Read(pw[:])
		password := hex.EncodeToString(pw[:])
		if _, err := conn.Exec(ctx, "CREATE ROLE "+schema+" LOGIN SUPERUSER PASSWORD '"+password+"'"); err != nil {
			t.Fatalf("testdb: create role: %v", err)
		}
		passwords.Store(schema, password)
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
		if _, ok := passwords.LoadAndDelete(schema); ok {
			if _, err := conn.Exec(ctx, "DROP ROLE "+schema); err != nil {
				t.Errorf("testdb: drop role: %v", err)
			}
		}
	})
	return schema
}

// passwords holds the password of each test role, by schema.
var passwords sync.Map

// PoolerURL returns TEST_POOLER_URL: empty, or a transaction-mode pooler in
// front of TEST_DATABASE_URL's database (see the package documentation).
func PoolerURL() string { return os.Getenv("TEST_POOLER_URL") }

// DirectConfig returns a pool configuration for TEST_DATABASE_URL, never
// through a pooler, whose connections use schema as their search_path.
func DirectConfig(t testing.TB, schema string) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatalf("testdb: parse TEST_DATABASE_URL: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	setExecMode(t, cfg)
	return cfg
}

// setExecMode sets the query exec mode TEST_QUERY_EXEC_MODE names, if any.
func setExecMode(t testing.TB, cfg *pgxpool.Config) {
	t.Helper()
	if mode := os.Getenv("TEST_QUERY_EXEC_MODE"); mode != "" {
		m, ok := queryExecModes[mode]
		if !ok {
			t.Fatalf("testdb: TEST_QUERY_EXEC_MODE=%q: want one of cache_statement, cache_describe, describe_exec, exec, simple_protocol", mode)
		}
		cfg.ConnConfig.DefaultQueryExecMode = m
	}
}

// PoolerURLFor returns TEST_POOLER_URL as schema's role (made by [Schema]),
// with default_query_exec_mode=exec unless the URL names a mode: the URL a
// process under test (the demo) uses to reach schema through the pooler.
// It fails t if TEST_POOLER_URL is unset.
func PoolerURLFor(t testing.TB, schema string) string {
	t.Helper()
	password, ok := passwords.Load(schema)
	if PoolerURL() == "" || !ok {
		t.Fatalf("testdb: no pooler role for schema %q (is TEST_POOLER_URL set?)", schema)
	}
	u, err := url.Parse(PoolerURL())
	if err != nil {
		t.Fatalf("testdb: parse TEST_POOLER_URL: %v", err)
	}
	u.User = url.UserPassword(schema, password.(string))
	q := u.Query()
	if q.Get("default_query_exec_mode") == "" {
		q.Set("default_query_exec_mode", "exec")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// ListenConfig returns, when tests run through a pooler, a direct
// connection's configuration for a store's LISTEN (pgstore's
// Options.ListenConfig); nil otherwise, meaning the pool's own connections.
func ListenConfig(t testing.TB) *pgx.ConnConfig {
	t.Helper()
	if PoolerURL() == "" {
		return nil
	}
	cfg, err := pgx.ParseConfig(URL(t))
	if err != nil {
		t.Fatalf("testdb: parse TEST_DATABASE_URL: %v", err)
	}
	return cfg
}

// Config returns a pool configuration for TEST_DATABASE_URL whose
// connections use schema as their search_path: directly, or through
// TEST_POOLER_URL as schema's role when it is set (in the query-exec mode
// its URL names, else "exec", which needs no prepared statement to outlive
// a transaction).
func Config(t testing.TB, schema string) *pgxpool.Config {
	t.Helper()
	pooler := PoolerURL()
	if pooler == "" {
		return DirectConfig(t, schema)
	}
	URL(t)
	password, ok := passwords.Load(schema)
	if !ok {
		t.Fatalf("testdb: schema %q was not made by testdb.Schema: no role to reach it through the pooler", schema)
	}
	cfg, err := pgxpool.ParseConfig(pooler)
	if err != nil {
		t.Fatalf("testdb: parse TEST_POOLER_URL: %v", err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = schema, password.(string)
	if os.Getenv("TEST_QUERY_EXEC_MODE") == "" && !strings.Contains(pooler, "default_query_exec_mode=") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	setExecMode(t, cfg)
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
	t.Cleanup(func() { closePool(t, pool, poolCloseWait) })
	return pool
}

// poolCloseWait bounds how long a test's end waits for its pool to close.
const poolCloseWait = 30 * time.Second

// closePool closes pool, failing t if that takes longer than wait.
// pgxpool's Close waits for every acquired connection to be released, so a
// connection a test left acquired (a transaction it never ended, after a
// Fatal) would otherwise hang the test binary until go test's timeout,
// with nothing to say which test it was.
func closePool(t testing.TB, pool *pgxpool.Pool, wait time.Duration) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		pool.Close()
	}()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Errorf("testdb: the pool did not close within %v: %d connection(s) still acquired (a transaction or a connection the test never released)",
			wait, pool.Stat().AcquiredConns())
		// The close goes on in the background; the binary's goroutine
		// check reports it if it never ends.
	}
}
