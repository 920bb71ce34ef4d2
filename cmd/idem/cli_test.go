package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/cmdmain"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Main(m))
}

// result is one CLI invocation's outcome.
type result struct {
	err    error
	stdout string
	stderr string
}

func (r result) code() int { return cmdmain.ExitCode(r.err) }

// idemCLI runs the CLI in-process with DATABASE_URL set to dbURL (empty:
// unset).
func idemCLI(ctx context.Context, dbURL string, args ...string) result {
	var stdout, stderr bytes.Buffer
	err := run(ctx, args, databaseEnv(dbURL), &stdout, &stderr)
	return result{err: err, stdout: stdout.String(), stderr: stderr.String()}
}

// databaseEnv is an environment with only DATABASE_URL, set to dbURL
// (empty: unset), for run.
func databaseEnv(dbURL string) func(string) string {
	return func(k string) string {
		if k == "DATABASE_URL" {
			return dbURL
		}
		return ""
	}
}

func mustRun(t *testing.T, dbURL string, args ...string) string {
	t.Helper()
	r := idemCLI(t.Context(), dbURL, args...)
	if r.err != nil {
		t.Fatalf("idem %s: %v\nstderr: %s", strings.Join(args, " "), r.err, r.stderr)
	}
	return r.stdout
}

// freshSchema returns TEST_DATABASE_URL on a fresh schema, and a pool on it.
func freshSchema(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	schema := testdb.Schema(t)
	return testdb.SchemaURL(t, schema), testdb.NewPool(t, testdb.Config(t, schema))
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	dbURL, pool := freshSchema(t)
	if out := mustRun(t, dbURL, "migrate", "status"); !strings.Contains(out, "pending") {
		t.Fatalf("status before up:\n%s", out)
	}
	if out := mustRun(t, dbURL, "migrate", "up"); !strings.Contains(out, "applied") {
		t.Fatalf("up:\n%s", out)
	}
	// Up again is a no-op.
	mustRun(t, dbURL, "migrate", "up")
	if !tableExists(t, pool, "idem_keys") {
		t.Fatal("idem_keys missing after migrate up")
	}

	r := idemCLI(t.Context(), dbURL, "migrate", "down")
	if r.code() != 2 || !strings.Contains(r.err.Error(), "--yes") {
		t.Fatalf("down without --yes: exit %d, %v", r.code(), r.err)
	}
	if !tableExists(t, pool, "idem_keys") {
		t.Fatal("down without --yes dropped the table")
	}
	// Down rolls back the most recent migration: versions 5 (the request
	// labels), 3 (the completion function) and 2 (the waited column) keep
	// the table,
	// version 1 drops it.
	for _, v := range []string{"5", "3", "2"} {
		if out := mustRun(t, dbURL, "migrate", "down", "--yes"); !strings.Contains(out, "pending") {
			t.Fatalf("down:\n%s", out)
		}
		if !tableExists(t, pool, "idem_keys") {
			t.Fatalf("the down of version %s dropped the table", v)
		}
	}
	mustRun(t, dbURL, "migrate", "down", "--yes")
	if tableExists(t, pool, "idem_keys") {
		t.Fatal("idem_keys still there after migrate down --yes")
	}
	if tableExists(t, pool, "idem_keys_goose_version") {
		t.Fatal("the version table is still there after migrate down --yes rolled everything back")
	}

	// Status looks and writes nothing, even for a table never migrated.
	if out := mustRun(t, dbURL, "--table", "never_keys", "migrate", "status"); !strings.Contains(out, "pending") {
		t.Fatalf("status of a table never migrated:\n%s", out)
	}
	if tableExists(t, pool, "never_keys_goose_version") {
		t.Fatal("migrate status created a version table")
	}

	// Another table, named with the global flag before the command.
	mustRun(t, dbURL, "--table", "other_keys", "migrate", "up")
	if !tableExists(t, pool, "other_keys") {
		t.Fatal("--table other_keys: table missing")
	}
	for _, args := range [][]string{{"migrate"}, {"migrate", "sideways"}, {"migrate", "up", "down"}} {
		if r := idemCLI(t.Context(), dbURL, args...); r.code() != 2 {
			t.Errorf("idem %v: exit %d (%v), want 2", args, r.code(), r.err)
		}
	}
}

// TestMigratePartitions creates a hash-partitioned table with --partitions,
// refuses a different count on it, and refuses an out-of-range count as a
// usage error.
func TestMigratePartitions(t *testing.T) {
	t.Parallel()
	dbURL, pool := freshSchema(t)
	mustRun(t, dbURL, "migrate", "up", "--partitions", "4")
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_inherits WHERE inhparent = 'idem_keys'::regclass`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("partitions after migrate up --partitions 4: %d, %v", n, err)
	}
	if r := idemCLI(t.Context(), dbURL, "migrate", "up", "--partitions", "8"); r.err == nil || !strings.Contains(r.err.Error(), "4 partitions") {
		t.Errorf("--partitions 8 on a table of 4: %v, want a mismatch error", r.err)
	}
	if r := idemCLI(t.Context(), dbURL, "migrate", "up", "--partitions", "-1"); r.code() != 2 {
		t.Errorf("--partitions -1: exit %d (%v), want 2", r.code(), r.err)
	}
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// migratedStore migrates a fresh schema with the CLI and opens a store on
// it.
func migratedStore(t *testing.T) (dbURL string, store *pgstore.Store) {
	t.Helper()
	dbURL, pool := freshSchema(t)
	mustRun(t, dbURL, "migrate", "up")
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return dbURL, store
}

// fixture migrates the schema and puts one key in each state: a live claim,
// an abandoned claim and a result.
func fixture(t *testing.T) (dbURL string, store *pgstore.Store) {
	t.Helper()
	dbURL, store = migratedStore(t)
	ctx := t.Context()
	claim := func(key string, lease time.Duration, labels idem.Labels) idem.Claim {
		k, err := idem.ParseClientKey(key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := store.Claim(ctx, idem.ClaimRequest{Scope: "tenant-1", Key: k, Lease: lease, Owner: "test", Fingerprint: "fp", Labels: labels})
		if err != nil || c.Status != idem.Acquired {
			t.Fatalf("claim %s: %+v %v", key, c, err)
		}
		return c
	}
	claim("live", time.Hour, idem.Labels{})
	claim("abandoned", time.Millisecond, idem.Labels{Method: "tools/call", Route: "refund"})
	done := claim("done", time.Hour, idem.Labels{Method: "POST", Route: "POST /payments/{id}", Caller: "acct-7"})
	res := idem.Result{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":7}` + "\n")}
	if err := store.Complete(ctx, done.Token, res); err != nil {
		t.Fatal(err)
	}
	// The abandoned claim's lease (1ms, on the database clock) is over
	// once the database says so.
	for {
		st, err := store.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Abandoned == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return dbURL, store
}

func TestStats(t *testing.T) {
	t.Parallel()
	dbURL, _ := fixture(t)
	out := mustRun(t, dbURL, "stats")
	for _, want := range []string{"live claims             1", "abandoned claims        1", "results                 1", "expired results         0", "table size"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats output lacks %q:\n%s", want, out)
		}
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, dbURL, "stats", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st["live_claims"] != 1.0 || st["abandoned_claims"] != 1.0 || st["results"] != 1.0 || st["expired_results"] != 0.0 ||
		st["oldest_live_claim"] == nil || st["oldest_abandoned_claim"] == nil || st["table_size_bytes"].(float64) <= 0 {
		t.Fatalf("stats --json: %v", st)
	}
	// Each JSON key is a text label, spaces as underscores (the size in
	// bytes).
	for k := range st {
		label := strings.ReplaceAll(strings.TrimSuffix(k, "_bytes"), "_", " ")
		if !strings.Contains(out, "\n"+label+"  ") && !strings.HasPrefix(out, label+"  ") {
			t.Errorf("stats --json key %q is no label of the text (%q):\n%s", k, label, out)
		}
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	dbURL, _ := fixture(t)
	out := mustRun(t, dbURL, "inspect", "--scope", "tenant-1", "--key", "done")
	for _, want := range []string{"state        completed", "status 201, 9 body bytes", "Content-Type", "body:\n{\"id\":7}\n", "owner        test"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	// --stored-key takes the stored form.
	if out2 := mustRun(t, dbURL, "inspect", "--scope", "tenant-1", "--stored-key", "key/done"); withoutTimes(out2) != withoutTimes(out) {
		t.Errorf("--stored-key key/done:\n%s\nwant the same as --key done:\n%s", out2, out)
	}
	if out := mustRun(t, dbURL, "inspect", "--scope", "tenant-1", "--key", "live"); !strings.Contains(out, "claimed (live)") {
		t.Errorf("live claim:\n%s", out)
	}
	if out := mustRun(t, dbURL, "inspect", "--scope", "tenant-1", "--key", "abandoned"); !strings.Contains(out, "abandoned: lease ran out") {
		t.Errorf("abandoned claim:\n%s", out)
	}

	var e struct {
		State  string      `json:"state"`
		Result idem.Result `json:"result"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, dbURL, "inspect", "--json", "--scope", "tenant-1", "--key", "done")), &e); err != nil {
		t.Fatal(err)
	}
	if e.State != "completed" || e.Result.Status != 201 || string(e.Result.Body) != `{"id":7}`+"\n" {
		t.Fatalf("inspect --json: %+v", e)
	}

	// Absent: another key, or the right key in another scope.
	for _, args := range [][]string{
		{"--scope", "tenant-1", "--key", "nope"},
		{"--scope", "tenant-2", "--key", "done"},
	} {
		r := idemCLI(t.Context(), dbURL, append([]string{"inspect"}, args...)...)
		if r.code() != 1 || !errors.Is(r.err, errAbsent) {
			t.Errorf("inspect %v: exit %d, %v; want exit 1, absent", args, r.code(), r.err)
		}
	}
	for _, args := range [][]string{
		{"--scope", "s"}, // no key
		{"--scope", "s", "--stored-key", "key/a", "--key", "a"}, // both
		{"--scope", "s", "--stored-key", "nonsense"},            // no form tag
		{"--scope", "s", "--key", "bad\x01"},                    // control character
		{"--scope", "s", "--key", strings.Repeat("k", 256)},     // too long
		{"--scope", "s", "--key", "a", "--table", "Bad-Name"},   // invalid table
	} {
		if r := idemCLI(t.Context(), dbURL, append([]string{"inspect"}, args...)...); r.code() != 2 {
			t.Errorf("inspect %q: exit %d (%v), want 2", args, r.code(), r.err)
		}
	}
}

func TestForget(t *testing.T) {
	t.Parallel()
	dbURL, store := fixture(t)
	ctx := t.Context()
	present := func(key string) bool {
		_, ok, err := store.Inspect(ctx, "tenant-1", mustKey(t, key))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	r := idemCLI(ctx, dbURL, "forget", "--scope", "tenant-1", "--key", "live")
	if r.code() != 1 || !strings.Contains(r.err.Error(), "live claim") || !present("live") {
		t.Fatalf("forget live without --force: exit %d, %v; present %v", r.code(), r.err, present("live"))
	}
	if out := mustRun(t, dbURL, "forget", "--scope", "tenant-1", "--key", "live", "--force"); out != `forgot scope "tenant-1", key "key/live", which held a live claim (owner test, generation 1, endpoint -, caller -): its next request runs again`+"\n" || present("live") {
		t.Fatalf("forget --force: %q, present %v", out, present("live"))
	}
	// An abandoned claim needs no --force.
	if out := mustRun(t, dbURL, "forget", "--scope", "tenant-1", "--key", "abandoned"); out != `forgot scope "tenant-1", key "key/abandoned", which held an abandoned claim (owner test, generation 2, endpoint tools/call refund, caller -): its next request runs again`+"\n" || present("abandoned") {
		t.Fatalf("forget abandoned: %q, present %v", out, present("abandoned"))
	}
	// A result does: its request's retry would run the side effect again.
	r = idemCLI(ctx, dbURL, "forget", "--scope", "tenant-1", "--key", "done")
	const refused = `idem: refusing to forget scope "tenant-1", key "key/done": it holds a recorded result (status 201, generation 3, endpoint POST /payments/{id}, caller acct-7), and its next request would run the side effect again; pass --force if that is what you want`
	if got := cmdmain.Message("idem", r.err); r.code() != 1 || got != refused || r.stdout != "" || !present("done") {
		t.Fatalf("forget a result without --force: exit %d\n got %s\nwant %s\npresent %v", r.code(), got, refused, present("done"))
	}
	if out := mustRun(t, dbURL, "forget", "--scope", "tenant-1", "--key", "done", "--force"); out != `forgot scope "tenant-1", key "key/done", which held a recorded result (status 201, generation 3, endpoint POST /payments/{id}, caller acct-7): its next request runs again`+"\n" || present("done") {
		t.Fatalf("forget --force a result: %q, present %v", out, present("done"))
	}
	if out := mustRun(t, dbURL, "forget", "--scope", "tenant-1", "--key", "done"); out != `scope "tenant-1", key "key/done" was absent: nothing to forget`+"\n" {
		t.Fatalf("forget absent: %q", out)
	}
	// A forgotten key claims afresh.
	c, err := store.Claim(ctx, idem.ClaimRequest{Scope: "tenant-1", Key: mustKey(t, "done")})
	if err != nil || c.Status != idem.Acquired {
		t.Fatalf("claim after forget: %+v %v", c, err)
	}
}

// withoutTimes drops the lines that show times relative to now.
func withoutTimes(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.Contains(line, " ago)") && !strings.Contains(line, "(in ") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

func mustKey(t *testing.T, s string) idem.Key {
	t.Helper()
	k, err := idem.ParseClientKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSweep(t *testing.T) {
	t.Parallel()
	t.Run("once", func(t *testing.T) {
		t.Parallel()
		dbURL, store := fixture(t)
		out := mustRun(t, dbURL, "sweep", "--once")
		if !strings.Contains(out, "swept: 1 abandoned claims released, 0 expired results deleted") {
			t.Fatalf("sweep --once: %s", out)
		}
		st, err := store.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Abandoned != 0 || st.Claimed != 1 || st.Completed != 1 {
			t.Fatalf("after sweep: %+v; want only the abandoned claim gone", st)
		}
	})
	t.Run("loop until cancelled", func(t *testing.T) {
		t.Parallel()
		dbURL, store := fixture(t)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan result, 1)
		go func() { done <- idemCLI(ctx, dbURL, "sweep", "--interval", "20ms") }()
		for {
			st, err := store.Stats(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if st.Abandoned == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if r := <-done; r.err != nil {
			t.Fatalf("sweep loop: %v", r.err)
		} else if !strings.Contains(r.stderr, "abandoned=1") {
			t.Fatalf("sweep loop did not log its sweep: %s", r.stderr)
		}
	})
}

func TestConnectionErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	check := func(t *testing.T, url string, code int, want string) {
		t.Helper()
		r := idemCLI(ctx, url, "stats")
		if r.code() != code || r.err == nil || !strings.Contains(r.err.Error(), want) {
			t.Fatalf("exit %d, %v; want exit %d and %q", r.code(), r.err, code, want)
		}
		msg := r.err.Error()
		if strings.Contains(msg, "secret") || strings.Contains(msg, "certainly-wrong-password") || strings.Contains(msg, "\n") {
			t.Fatalf("the message leaks the password or spans lines: %q", msg)
		}
	}
	// No database needed for these.
	t.Run("missing", func(t *testing.T) {
		check(t, "", 2, "no database: set DATABASE_URL or pass --database-url")
	})
	t.Run("malformed", func(t *testing.T) {
		check(t, "postgres://idem:secret@127.0.0.1:port/db", 2, "not a valid PostgreSQL URL")
	})
	t.Run("refused", func(t *testing.T) {
		check(t, "postgres://idem:secret@127.0.0.1:1/db?connect_timeout=5", 1, "cannot connect to PostgreSQL at 127.0.0.1:1 (user \"idem\", database \"db\"): connect: connection refused")
	})
	t.Run("wrong password", func(t *testing.T) {
		u, _ := url.Parse(testdb.URL(t))
		u.User = url.UserPassword(u.User.Username(), "certainly-wrong-password")
		check(t, u.String(), 1, "password authentication failed")
	})
	t.Run("no table", func(t *testing.T) {
		dbURL, _ := freshSchema(t) // migrated by nobody
		check(t, dbURL, 1, `run "idem migrate up" first`)
		// --database-url wins over DATABASE_URL.
		r := idemCLI(ctx, "postgres://idem:secret@127.0.0.1:1/db?connect_timeout=5", "stats", "--database-url", dbURL)
		if r.err == nil || !strings.Contains(r.err.Error(), "does not exist") {
			t.Fatalf("--database-url did not win: %v", r.err)
		}
	})
}

func TestHelp(t *testing.T) {
	t.Parallel()
	// Asked for, the usage goes to stdout (idem --help | less).
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"migrate", "--help"}, {"sweep", "--help"},
		{"stats", "--help"}, {"inspect", "--help"}, {"forget", "--help"}, {"release", "--help"}, {"digest", "--help"}} {
		r := idemCLI(t.Context(), "", args...)
		if r.code() != 0 || !strings.Contains(r.stdout, "Usage: idem") || r.stderr != "" {
			t.Errorf("idem %v: exit %d (%v), stdout %q, stderr %q", args, r.code(), r.err, r.stdout, r.stderr)
		}
	}
	if r := idemCLI(t.Context(), "", "stats", "--help"); !strings.Contains(r.stdout, "-json") {
		t.Errorf("stats --help does not list its flags:\n%s", r.stdout)
	}
	for _, args := range [][]string{{}, {"frobnicate"}, {"stats", "--nope"}, {"stats", "extra"}} {
		if r := idemCLI(t.Context(), "", args...); r.code() != 2 {
			t.Errorf("idem %v: exit %d (%v), want 2", args, r.code(), r.err)
		}
	}
}

// TestUsageErrors: a bad command line gets one line naming the problem and
// where the help is, not the whole usage, and one "idem:" prefix.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "idem: flag provided but not defined: -nope (see idem --help)"},
		{[]string{"stats", "--nope"}, "idem: stats: flag provided but not defined: -nope (see idem stats --help)"},
		{[]string{"stats", "extra"}, `idem: stats: unexpected arguments ["extra"] (see idem stats --help)`},
		{[]string{"frobnicate"}, `idem: unknown command "frobnicate" (see idem --help)`},
	} {
		r := idemCLI(t.Context(), "", tc.args...)
		if r.code() != 2 {
			t.Errorf("idem %v: exit %d (%v), want 2", tc.args, r.code(), r.err)
			continue
		}
		if got := cmdmain.Message("idem", r.err); got != tc.want {
			t.Errorf("idem %v:\n got %q\nwant %q", tc.args, got, tc.want)
		}
		if r.stderr != "" || r.stdout != "" {
			t.Errorf("idem %v printed more than its error line: stdout %q, stderr %q", tc.args, r.stdout, r.stderr)
		}
	}
}
