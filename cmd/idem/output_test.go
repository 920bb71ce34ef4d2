package main

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/cmdmain"
	"github.com/idemkit/idem/internal/testlog"
)

// The tests in this file compare the CLI's whole output with the text it
// must print, after norm: times and durations that depend on the clock
// become <time> and <d>, and runs of spaces (tabwriter's padding around
// them) become two spaces.
var (
	timeRE     = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	durationRE = regexp.MustCompile(`\b(\d+h)?(\d+m)?\d+(\.\d+)?(ms|s)\b`)
	logTimeRE  = regexp.MustCompile(`(?m)^time=\S+ `)
	spacesRE   = regexp.MustCompile(`  +`)
)

func norm(s string) string {
	s = logTimeRE.ReplaceAllString(s, "")
	s = timeRE.ReplaceAllString(s, "<time>")
	s = durationRE.ReplaceAllString(s, "<d>")
	return spacesRE.ReplaceAllString(s, "  ")
}

func checkOutput(t *testing.T, what, got, want string) {
	t.Helper()
	if norm(got) != norm(want) {
		t.Errorf("%s:\n--- got\n%s--- want\n%s", what, got, want)
	}
}

// doneEntry is how inspect shows the fixture's completed key.
const doneEntry = `scope        tenant-1
key          key/done
digest       f21d24f8f755e5cf
endpoint     POST /payments/{id}
caller       acct-7
state        completed
generation   3
owner        test
fingerprint  fp
claimed      <time> (<d> ago)
completed    <time> (<d> ago)
expires      <time> (in <d>)
result       status 201, 9 body bytes
header:
  Content-Type: application/json
body:
{"id":7}
`

// TestInspectClientKey: the key a client sent, typed as is, finds its
// entry.
func TestInspectClientKey(t *testing.T) {
	t.Parallel()
	dbURL, _ := fixture(t)
	checkOutput(t, "inspect --key done", mustRun(t, dbURL, "inspect", "--scope", "tenant-1", "--key", "done"), doneEntry)
}

// TestErrorLines: what a mistake prints, whole.
func TestErrorLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "--scope", "", "--key", ""}, `idem: inspect: --key "": empty (see idem inspect --help)`},
		{[]string{"inspect", "--scope", "s", "--key", "a\x01"}, `idem: inspect: --key "a\x01": byte 0x01 at offset 1 is not printable ASCII (see idem inspect --help)`},
		{[]string{"inspect", "--scope", "s"}, `idem: inspect: give exactly one of --key (the key the client sent), --stored-key (the key as stored) and --digest (a log line's key_digest) (see idem inspect --help)`},
		{[]string{"inspect", "--digest", "F21D"}, `idem: inspect: --digest "F21D": want the 16 hex digits of a key_digest (see idem inspect --help)`},
		{[]string{"inspect", "--digest", "f21d24f8f755e5cf", "--key", "a"}, `idem: inspect: give one of --key, --stored-key and --digest (see idem inspect --help)`},
		{[]string{"forget", "--key", "a"}, `idem: forget: --scope is required (it may be empty: --scope '') (see idem forget --help)`},
		{[]string{"release", "--scope", "s", "--key", "a", "--generation", "x"}, `idem: release: --generation "x": want a positive integer (see idem release --help)`},
		{[]string{"digest", "--scope", "s", "--key", "a", "--route", "/x"}, `idem: digest: --scope names one entry: --route and --caller select among a key's scopes without it (see idem digest --help)`},
		{[]string{"keys", "--digest", "xyz"}, `idem: keys: --digest "xyz": want the 16 hex digits of a key_digest (see idem keys --help)`},
		{[]string{"inspect", "--scope", "s", "--stored-key", "order-42"}, `idem: inspect: --stored-key "order-42": no form tag (a stored key starts with key/, id/, req/, call/ or round/; the key a client sent goes in --key) (see idem inspect --help)`},
		{[]string{"--table", "Bad-Name", "stats"}, `idem: --table "Bad-Name": want table or schema.table, lower-case letters, digits and underscores, table at most 48 bytes (see idem --help)`},
		{[]string{"migrate", "up", "--table", "Bad-Name"}, `idem: --table "Bad-Name": want table or schema.table, lower-case letters, digits and underscores, table at most 48 bytes (see idem --help)`},
		{[]string{"migrate", "up", "--partitions", "-1"}, `idem: migrate: --partitions -1: want 0 to 1024 (see idem migrate --help)`},
		{[]string{"keys", "--state", "done"}, `idem: keys: --state "done": want live, abandoned, completed or expired (see idem keys --help)`},
		{[]string{"keys", "--limit", "0"}, `idem: keys: --limit 0: want 1 to 10000 (see idem keys --help)`},
		{[]string{"keys", "--prefix", "a", "--stored-prefix", "key/a"}, `idem: keys: give at most one of --prefix and --stored-prefix (see idem keys --help)`},
		{[]string{"scope"}, `idem: scope: --route is required (the ServeMux pattern, such as 'POST /invoices'), or --mcp (see idem scope --help)`},
		{[]string{"scope", "--mcp", "--route", "/x"}, `idem: scope: --route is for the HTTP middleware's scope; an MCP scope (--mcp) has none (see idem scope --help)`},
		{[]string{"scope", "-H", "Authorization", "--route", "/x"}, `idem: scope: invalid value "Authorization" for flag -H: want "Name: value" (see idem scope --help)`},
	} {
		r := idemCLI(t.Context(), "", tc.args...)
		if got := cmdmain.Message("idem", r.err); got != tc.want || r.code() != 2 {
			t.Errorf("idem %q: exit %d\n got %s\nwant %s", tc.args, r.code(), got, tc.want)
		}
	}
}

// TestUnresolvableHost: one line, the host named once.
func TestUnresolvableHost(t *testing.T) {
	t.Parallel()
	r := idemCLI(t.Context(), "postgres://idem:secret@nonexistent.invalid:5432/x?connect_timeout=5", "stats")
	line := cmdmain.Message("idem", r.err)
	if r.code() != 1 || strings.Contains(line, "\n") || strings.Count(line, "nonexistent.invalid") != 2 ||
		!strings.HasPrefix(line, `idem: cannot connect to PostgreSQL at nonexistent.invalid:5432 (user "idem", database "x"): cannot resolve host "nonexistent.invalid": `) {
		t.Errorf("exit %d, %q", r.code(), line)
	}
}

// TestMigrateDownSaysWhatItDoes: down names the migration it would roll
// back and its effect, does exactly that once confirmed, and with nothing
// applied says so and leaves nothing behind.
func TestMigrateDownSaysWhatItDoes(t *testing.T) {
	t.Parallel()
	dbURL, pool := freshSchema(t)
	allPending := `table idem_keys
VERSION  STATE    APPLIED AT
1        pending  -
2        pending  -
3        pending  -
4        pending  -
`
	for _, args := range [][]string{{"migrate", "down"}, {"migrate", "down", "--yes"}} {
		checkOutput(t, strings.Join(args, " ")+" with nothing applied", mustRun(t, dbURL, args...),
			"no migration of table idem_keys is applied: nothing to roll back\n"+allPending)
		if tableExists(t, pool, "idem_keys_goose_version") {
			t.Fatalf("%s with nothing applied left a version table", strings.Join(args, " "))
		}
	}

	mustRun(t, dbURL, "migrate", "up")
	for _, step := range []struct{ confirm, done, status string }{
		{
			"idem: migrate down would roll back migration 4 (request_labels) of table idem_keys: the table and its rows stay, but instances of this release need the migration; add --yes to confirm (see idem migrate --help)",
			"rolled back migration 4 (request_labels) of table idem_keys\n",
			"1        applied  <time>\n2        applied  <time>\n3        applied  <time>\n4        pending  -\n",
		},
		{
			"idem: migrate down would roll back migration 3 (complete_by_primary_key) of table idem_keys: the table and its rows stay, but instances of this release need the migration; add --yes to confirm (see idem migrate --help)",
			"rolled back migration 3 (complete_by_primary_key) of table idem_keys\n",
			"1        applied  <time>\n2        applied  <time>\n3        pending  -\n4        pending  -\n",
		},
		{
			"idem: migrate down would roll back migration 2 (notify_waiters) of table idem_keys: the table and its rows stay, but instances of this release need the migration; add --yes to confirm (see idem migrate --help)",
			"rolled back migration 2 (notify_waiters) of table idem_keys\n",
			"1        applied  <time>\n2        pending  -\n3        pending  -\n4        pending  -\n",
		},
		{
			"idem: migrate down would roll back migration 1 (create_table) of table idem_keys: it DROPS the table, every recorded result and the version table; add --yes to confirm (see idem migrate --help)",
			"rolled back migration 1 (create_table) of table idem_keys: dropped the table, its recorded results and its version table\n",
			"1        pending  -\n2        pending  -\n3        pending  -\n4        pending  -\n",
		},
	} {
		r := idemCLI(t.Context(), dbURL, "migrate", "down")
		if got := cmdmain.Message("idem", r.err); r.code() != 2 || got != step.confirm || r.stdout != "" {
			t.Fatalf("migrate down: exit %d, stdout %q\n got %s\nwant %s", r.code(), r.stdout, got, step.confirm)
		}
		checkOutput(t, "migrate down --yes", mustRun(t, dbURL, "migrate", "down", "--yes"),
			step.done+"table idem_keys\nVERSION  STATE    APPLIED AT\n"+step.status)
	}
	if tableExists(t, pool, "idem_keys") || tableExists(t, pool, "idem_keys_goose_version") {
		t.Fatal("a table is left after rolling back every migration")
	}
}

// TestSweepLogsEachRound: the sweep loop logs when it starts, each round
// (what it removed, nothing included) and when it stops.
func TestSweepLogsEachRound(t *testing.T) {
	t.Parallel()
	dbURL, _ := fixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr testlog.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sweep", "--interval", "20ms"}, databaseEnv(dbURL), &stdout, &stderr)
	}()
	for deadline := time.Now().Add(30 * time.Second); strings.Count(stderr.String(), "msg=swept") < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("no three rounds logged in 30s:\n%s", stderr.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(logTimeRE.ReplaceAllString(stderr.String(), ""), "\n"), "\n")
	want := []string{
		`level=INFO msg="sweeping until SIGINT or SIGTERM" table=idem_keys interval=20ms batch=1000`,
		`level=INFO msg=swept abandoned=1 expired=0`,
	}
	for len(want) < len(lines)-1 {
		want = append(want, `level=INFO msg=swept abandoned=0 expired=0`)
	}
	want = append(want, `level=INFO msg="stopped sweeping" rounds=`+strconv.Itoa(len(lines)-2)+` abandoned=1 expired=0`)
	if strings.Join(lines, "\n") != strings.Join(want, "\n") || stdout.String() != "" {
		t.Errorf("sweep logged:\n%s\nwant:\n%s\nstdout %q", strings.Join(lines, "\n"), strings.Join(want, "\n"), stdout.String())
	}
}

// TestCommandList: the usage's command list, exactly, and its columns
// still aligned when a command's name is longer than any today.
func TestCommandList(t *testing.T) {
	t.Parallel()
	got := commandList(commands[:2])
	want := "" +
		"  migrate  up|down|status\n" +
		"           create, upgrade, roll back or show the idem schema\n" +
		"  sweep    [--once] [--interval D] [--batch N]\n" +
		"           release abandoned claims and delete expired results; without --once, until interrupted\n"
	if got != want {
		t.Errorf("the command list:\n%s\nwant\n%s", got, want)
	}

	got = commandList(append(commands[:1:1], command{name: "partitions", usage: "list|add N", summary: "show or add partitions"}))
	want = "" +
		"  migrate     up|down|status\n" +
		"              create, upgrade, roll back or show the idem schema\n" +
		"  partitions  list|add N\n" +
		"              show or add partitions\n"
	if got != want {
		t.Errorf("with a longer name, the command list:\n%s\nwant\n%s", got, want)
	}
}

// TestPrintResult: headers sorted by name, each value on its line in its
// order, and the body ended by a newline.
func TestPrintResult(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printResult(&b, idem.Result{Status: 200, Header: http.Header{
		"X-Trace":      {"b", "a"},
		"Content-Type": {"text/plain"},
		"Location":     {"/invoices/7"},
	}, Body: []byte("done")})
	want := "header:\n  Content-Type: text/plain\n  Location: /invoices/7\n  X-Trace: b\n  X-Trace: a\nbody:\ndone\n"
	if b.String() != want {
		t.Errorf("printResult:\n%q\nwant\n%q", b.String(), want)
	}
}
