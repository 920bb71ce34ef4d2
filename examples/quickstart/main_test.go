package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }

// TestQuickstart runs the README's program against PostgreSQL: a retry gets
// the first answer and creates no second payment; another key pays again.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	dbURL := testdb.SchemaURL(t, testdb.Schema(t))
	ctx := t.Context()
	handler, shutdown, err := setup(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(func() { srv.Close(); shutdown() })

	post := func(key, body string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
	}

	status, replayed, first := post("pay-1", `{"amount_cents": 1200}`)
	if status != http.StatusCreated || replayed != "" {
		t.Fatalf("first: %d replayed=%q %s", status, replayed, first)
	}
	status, replayed, again := post("pay-1", `{"amount_cents": 1200}`)
	if status != http.StatusCreated || replayed != "true" || again != first {
		t.Fatalf("retry: %d replayed=%q %s, want the first answer %s", status, replayed, again, first)
	}
	if status, _, other := post("pay-2", `{"amount_cents": 500}`); status != http.StatusCreated || other == first {
		t.Fatalf("another key: %d %s", status, other)
	}
	if status, _, body := post("pay-3", `{"amount_cents": -1}`); status != http.StatusBadRequest {
		t.Fatalf("a bad amount: %d %s", status, body)
	}

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var payments int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&payments); err != nil {
		t.Fatal(err)
	}
	if payments != 2 {
		t.Fatalf("%d payments, want 2 (one per key)", payments)
	}
}

// Without DATABASE_URL the program says so, rather than letting pgx try
// the defaults (role "root" does not exist).
func TestQuickstartWithoutDatabaseURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	err := run()
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL is not set") {
		t.Fatalf("run without DATABASE_URL: %v", err)
	}
}

// The README's quickstart is this program, byte for byte: what a newcomer
// pastes is what this package's tests compile and run.
func TestREADMEShowsThisFile(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- examples/quickstart/main.go -->\n```go\n"
	_, after, ok := bytes.Cut(readme, []byte(marker))
	if !ok {
		t.Fatalf("README.md has no %q followed by the quickstart's code block", marker)
	}
	block, _, ok := bytes.Cut(after, []byte("```\n"))
	if !ok {
		t.Fatal("README.md: the quickstart's code block does not end")
	}
	if !bytes.Equal(block, src) {
		t.Errorf("README.md's quickstart differs from examples/quickstart/main.go: copy the file into the block")
	}
}

// TestQuickstartRuns builds the program and runs it as a user does, on the
// address ADDR names (a free port), then on PORT: it listens there, pays
// once per key, and stops on SIGINT.
func TestQuickstartRuns(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "quickstart")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbURL := testdb.SchemaURL(t, testdb.Schema(t))
	for _, env := range []string{"ADDR=127.0.0.1:0", "PORT=" + freePort(t)} {
		t.Run(env, func(t *testing.T) {
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "ADDR=", "PORT=", env)
			var stderr demoproc.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var base string
			for deadline := time.Now().Add(30 * time.Second); base == ""; time.Sleep(20 * time.Millisecond) {
				if _, after, ok := strings.Cut(stderr.String(), "listening on "); ok {
					base, _, _ = strings.Cut(after, "\n")
					base = strings.Replace(base, "http://[::]:", "http://127.0.0.1:", 1)
				}
				if time.Now().After(deadline) {
					_ = cmd.Process.Kill()
					t.Fatalf("the quickstart never said where it listens:\n%s", stderr.String())
				}
			}
			if _, port, _ := strings.Cut(env, "PORT="); (port != "" && !strings.HasSuffix(base, ":"+port)) || strings.HasSuffix(base, ":8080") {
				t.Errorf("with %s it listens on %s", env, base)
			}
			key := "pay-" + env
			for i := range 2 {
				req, _ := http.NewRequest(http.MethodPost, base+"/payments", strings.NewReader(`{"amount_cents": 1200}`))
				req.Header.Set("Idempotency-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated || (i == 1) != (resp.Header.Get("Idempotent-Replayed") == "true") {
					t.Errorf("POST %d: %d, replayed %q", i, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
				}
			}
			_ = cmd.Process.Signal(os.Interrupt)
			if err := <-done; err != nil {
				t.Errorf("after SIGINT: %v\n%s", err, stderr.String())
			}
		})
	}
}

// freePort returns a port nothing listens on (a moment ago).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
