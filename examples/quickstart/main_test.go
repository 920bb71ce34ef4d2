package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }

// TestQuickstartRuns builds the README's program and runs it as a user
// does, on the address ADDR names, against PostgreSQL: a retry gets the
// first answer and creates no second payment, another key pays again; it
// stops on SIGINT, and on SIGTERM (what Kubernetes and Docker send).
func TestQuickstartRuns(t *testing.T) {
	t.Parallel()
	bin := build(t)
	for _, stop := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		t.Run(stop.String(), func(t *testing.T) {
			dbURL := testdb.SchemaURL(t, testdb.Schema(t))
			addr := testdb.FreeAddr(t)
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "ADDR="+addr)
			var stderr demoproc.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), "listening on http://"+addr); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					_ = cmd.Process.Kill()
					<-done
					t.Fatalf("the quickstart never said it listens on %s:\n%s", addr, stderr.String())
				}
			}
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			post := func(key string) (int, string, string) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/payments", nil)
				req.Header.Set("Idempotency-Key", key)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
			}
			status, replayed, first := post("pay-1")
			if status != http.StatusCreated || replayed != "" {
				t.Fatalf("first: %d replayed=%q %s", status, replayed, first)
			}
			status, replayed, again := post("pay-1")
			if status != http.StatusCreated || replayed != "true" || again != first {
				t.Fatalf("retry: %d replayed=%q %s, want the first answer %s", status, replayed, again, first)
			}
			if status, _, other := post("pay-2"); status != http.StatusCreated || other == first {
				t.Fatalf("another key: %d %s", status, other)
			}
			if !strings.Contains(stderr.String(), "IDEM_SCOPE_SECRET is not set") {
				t.Errorf("no warning of the missing scope secret:\n%s", stderr.String())
			}
			_ = cmd.Process.Signal(stop)
			if err := <-done; err != nil {
				t.Errorf("after %v: %v\n%s", stop, err, stderr.String())
			}

			conn, err := pgx.Connect(t.Context(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(t.Context())
			var payments int
			if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM payments`).Scan(&payments); err != nil {
				t.Fatal(err)
			}
			if payments != 2 {
				t.Fatalf("%d payments, want 2 (one per key)", payments)
			}
		})
	}
}

// Without DATABASE_URL the program says so, rather than letting pgx try
// the defaults (role "root" does not exist).
func TestQuickstartWithoutDatabaseURL(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(build(t))
	cmd.Env = append(os.Environ(), "DATABASE_URL=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "DATABASE_URL is not set") {
		t.Fatalf("run without DATABASE_URL: %v\n%s", err, out)
	}
}

func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "quickstart")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The README's programs are these files, byte for byte: what a newcomer
// pastes is what the tests compile and run (examples/minimal runs its own).
func TestREADMEShowsThisFile(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for file, marker := range map[string]string{
		"main.go":            "<!-- examples/quickstart/main.go -->\n```go\n",
		"../minimal/main.go": "<!-- examples/minimal/main.go -->\n```go\n",
	} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, after, ok := bytes.Cut(readme, []byte(marker))
		if !ok {
			t.Errorf("README.md has no %q followed by %s's code block", marker, file)
			continue
		}
		block, _, ok := bytes.Cut(after, []byte("```\n"))
		if !ok {
			t.Errorf("README.md: the code block of %s does not end", file)
		}
		if !bytes.Equal(block, src) {
			t.Errorf("README.md's block differs from %s: copy the file into the block", file)
		}
	}
}
