package testdb_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testdb"
)

// TestServerStopsAndStarts: a private server of this module's binaries,
// which have no Containers, is a local process and survives a crash
// (pgcontainer's tests check one in a container).
func TestServerStopsAndStarts(t *testing.T) {
	t.Parallel()
	testdb.CheckStopsAndStarts(t, testdb.StartServer(t))
}

// TestSchemasAreIsolated: two tests' schemas in the one database do not see
// each other's tables, and a schema is gone once its test has ended.
func TestSchemasAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var first string
	t.Run("first", func(t *testing.T) {
		pool, schema := testdb.Pool(t)
		first = schema
		if _, err := pool.Exec(ctx, `CREATE TABLE things (id int)`); err != nil {
			t.Fatal(err)
		}
	})
	pool, schema := testdb.Pool(t)
	if schema == first {
		t.Fatalf("two tests got the same schema %s", schema)
	}
	if _, err := pool.Exec(ctx, `SELECT * FROM things`); err == nil {
		t.Fatal("the second schema sees the first one's table")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, first).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("schema %s outlived its test", first)
	}
}

// TestServerFromBinDir: with BinEnv set, a private server runs those
// binaries as a local process (its data directory is a local temporary
// one, not a container's), whatever Docker would offer.
func TestServerFromBinDir(t *testing.T) {
	bin := os.Getenv(testdb.BinEnv)
	if bin == "" {
		dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
		if len(dirs) == 0 {
			t.Skip(testdb.SkipReason + " server binaries under /usr/lib/postgresql")
		}
		bin = filepath.Dir(dirs[0])
		t.Setenv(testdb.BinEnv, bin)
	}
	out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output()
	if err != nil {
		t.Fatalf("%s/postgres --version: %v", bin, err)
	}
	// "postgres (PostgreSQL) 18.4" (or "15.18 (Debian 15.18-0+deb12u1)")
	fields := strings.Fields(string(out))
	want := strings.SplitN(fields[2], ".", 2)[0]

	s := testdb.StartServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var dataDir string
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory'), current_setting('server_version_num')::int").Scan(&dataDir, &version); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dataDir, os.TempDir()) {
		t.Errorf("data_directory = %s: not a local server's (under %s)", dataDir, os.TempDir())
	}
	if got := strconv.Itoa(version / 10000); got != want {
		t.Errorf("server major version %s, want %s (the binaries in %s)", got, want, bin)
	}
}
