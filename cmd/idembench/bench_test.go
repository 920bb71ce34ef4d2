package main

import (
	"bytes"
	"encoding/csv"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testdb"
)

// noEnv is an empty environment: every test names its database with
// -database-url.
func noEnv(string) string { return "" }

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"defaults", nil, ""},
		{"no database", []string{"-database-url", ""}, "no database"},
		{"unknown mode", []string{"-mode", "store,fast"}, `unknown mode "fast"`},
		{"renamed mode", []string{"-mode", "raw"}, `unknown mode "raw"`},
		{"zero instances", []string{"-instances", "1,0"}, "-instances"},
		{"negative waiters", []string{"-waiters", "-1"}, "-waiters"},
		{"zero concurrency", []string{"-concurrency", "0"}, "-concurrency"},
		{"zero duration", []string{"-duration", "0s"}, "-duration"},
		{"retry share above one", []string{"-retry-share", "1.5"}, "-retry-share"},
		{"no replay keys", []string{"-replay-keys", "0"}, "-replay-keys"},
		{"stray argument", []string{"extra"}, "unexpected arguments"},
		{"zero rounds", []string{"-rounds", "0"}, "-rounds"},
		{"negative replay cache", []string{"-replay-cache", "-1"}, "-replay-cache"},
		{"profile over rounds", []string{"-cpuprofile", "x", "-rounds", "2"}, "-rounds 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-database-url", "postgres://x/y"}, tt.args...)
			cfg, err := parseFlags(args, noEnv, io.Discard)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("parseFlags(%q) = %v", args, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("parseFlags(%q) = %v, want an error containing %q", args, err, tt.wantErr)
			case tt.wantErr == "" && (len(cfg.modes) != len(allModes) || cfg.poolConns != cfg.concurrency):
				t.Fatalf("defaults: modes %v, pool %d, concurrency %d", cfg.modes, cfg.poolConns, cfg.concurrency)
			}
		})
	}
}

func TestParseModesDeduplicates(t *testing.T) {
	t.Parallel()
	got, err := parseModes("replay, floor,replay,wait")
	if err != nil || strings.Join(got, ",") != "replay,floor,wait" {
		t.Fatalf("parseModes = %v, %v; want [replay floor wait]", got, err)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	if p := percentile(lat, 0.50); p != 50*time.Millisecond {
		t.Errorf("p50 = %v, want 50ms", p)
	}
	if p := percentile(lat, 0.99); p != 99*time.Millisecond {
		t.Errorf("p99 = %v, want 99ms", p)
	}
	if p := percentile(nil, 0.99); p != 0 {
		t.Errorf("p99 of nothing = %v, want 0", p)
	}
}

// TestRunAllModes runs every mode briefly against PostgreSQL: each request's
// answer is checked by the tool (201, the handler's body, replayed or not as
// the mode expects), so zero errors means every mode did what it says. The
// tool's own schema must be gone afterwards.
func TestRunAllModes(t *testing.T) {
	url := testdb.URL(t)
	ctx := t.Context()
	before := benchSchemas(t, url)
	var out, errOut bytes.Buffer
	csvPath := filepath.Join(t.TempDir(), "bench.csv")
	err := run(ctx, []string{"-database-url", url, "-mode", "all,wait", "-concurrency", "4", "-duration", "400ms", "-rounds", "2",
		"-warmup", "100ms", "-replay-keys", "10", "-retry-share", "0.5", "-instances", "1,2", "-waiters", "0,2", "-csv", csvPath}, noEnv, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{"floor", "demo-floor", "http-bare", "% of floor", "% of demo-floor", "% of http-bare", "mixed: retry share 0.50", "wake p99",
		"% of http-insert", "% of http-onetx-floor", "one-commit"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, row := range rows {
		if i == 0 {
			if strings.Join(row, ",") != "series,clients,instances,metric,value,unit" {
				t.Fatalf("CSV header = %q", row)
			}
			continue
		}
		// The one-commit path's waits run as many keys at once as the
		// pools have room for: a pool of 4 per instance, each key a
		// holder and 2 waiters.
		clients := "4"
		if instances, _ := strconv.Atoi(row[2]); strings.Contains(row[0], "onetx-wake-") || strings.HasPrefix(row[0], "onetx-complete-") {
			clients = strconv.Itoa(instances * 4 / 3)
		}
		if row[1] != clients {
			t.Errorf("CSV row %q: clients not %s", row, clients)
		}
		if _, err := strconv.ParseFloat(row[4], 64); err != nil {
			t.Errorf("CSV row %q: value not a number", row)
		}
		seen[row[0]+","+row[2]+","+row[3]+","+row[5]] = true
	}
	for _, want := range []string{"unique,1,throughput,req/s", "unique,1,ratio,of floor", "demo,1,ratio,of demo-floor",
		"demo-onetx,1,ratio-http,of http-onetx-floor", "demo-onetx,1,ratio-insert,of http-insert",
		"demo-onetx-sql,1,ratio-http,of http-onetx-floor",
		"wait-wake-2,2,p99,ms", "wait-wake-2,1,p50,ms", "complete-waiters-0,2,p99,ms", "wait-onetx-wake-2,2,p99,ms"} {
		if !seen[want] {
			t.Errorf("CSV lacks a row %q; has %v", want, seen)
		}
	}
	if after := benchSchemas(t, url); after > before {
		t.Errorf("idembench schemas: %d before the run, %d after: the run's schema was not dropped", before, after)
	}
}

func TestRunReportsFailures(t *testing.T) {
	url := testdb.URL(t)
	// A table name migrations reject: setup fails before anything runs.
	err := run(t.Context(), []string{"-database-url", url, "-table", "Bad-Name", "-duration", "100ms"}, noEnv, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "Bad-Name") {
		t.Fatalf("run with an invalid table = %v, want an error naming it", err)
	}
}

func benchSchemas(t *testing.T, url string) int {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'idembench\_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRunDoorModes: every door's modes run (new keys and replays, each
// beside the same work without idem), none fails, and each is compared
// with its bare mode.
func TestRunDoorModes(t *testing.T) {
	url := testdb.URL(t)
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"-database-url", url, "-mode", "doors", "-concurrency", "2", "-duration", "300ms", "-rounds", "1",
		"-warmup", "50ms", "-replay-keys", "5"}, noEnv, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{"call-onetx", "% of call-bare", "grpc-replay", "% of grpc-bare", "connect-replay", "% of connect-bare"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
