package main

import (
	"bytes"
	"io"
	"net"
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

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }

// TestQuickstartRuns builds the README's program and runs it as a user
// does, on the address ADDR names, against PostgreSQL: a retry gets the
// first answer and creates no second payment, another key pays again; it
// stops on SIGINT, and on SIGTERM (what Kubernetes and Docker send).
func TestQuickstartRuns(t *testing.T) {
	t.Parallel()
	bin := build(t, ".")
	for _, stop := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		t.Run(stop.String(), func(t *testing.T) {
			dbURL := testdb.SchemaURL(t, testdb.Schema(t))
			addr := testdb.FreeAddr(t)
			p := start(t, bin, addr, "DATABASE_URL="+dbURL, "ADDR="+addr)
			status, replayed, first := post(t, "http://"+addr+"/payments", "pay-1")
			if status != http.StatusCreated || replayed != "" {
				t.Fatalf("first: %d replayed=%q %s", status, replayed, first)
			}
			status, replayed, again := post(t, "http://"+addr+"/payments", "pay-1")
			if status != http.StatusCreated || replayed != "true" || again != first {
				t.Fatalf("retry: %d replayed=%q %s, want the first answer %s", status, replayed, again, first)
			}
			if status, _, other := post(t, "http://"+addr+"/payments", "pay-2"); status != http.StatusCreated || other == first {
				t.Fatalf("another key: %d %s", status, other)
			}
			_ = p.cmd.Process.Signal(stop)
			if err := <-p.done; err != nil {
				t.Errorf("after %v: %v\n%s", stop, err, p.stderr.String())
			}
			// Read once the program has exited: its stderr reaches
			// p.stderr through a pipe another goroutine copies.
			if !strings.Contains(p.stderr.String(), "IDEM_SCOPE_SECRET is not set") {
				t.Errorf("no warning of the missing scope secret:\n%s", p.stderr.String())
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

// TestMinimalRuns builds the README's smallest program, examples/minimal
// (on a free address instead of 127.0.0.1:8080), and runs it against
// PostgreSQL: a retry with the same key is answered without running the
// handler again, another key runs it.
func TestMinimalRuns(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../minimal/main.go")
	if err != nil {
		t.Fatal(err)
	}
	const fixed = `"127.0.0.1:8080"`
	if !strings.Contains(string(src), fixed) {
		t.Fatalf("examples/minimal does not listen on %s", fixed)
	}
	addr := testdb.FreeAddr(t)
	// A directory beginning with _ is inside the module but outside ./...
	dir, err := os.MkdirTemp("../minimal", "_run")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(strings.Replace(string(src), fixed, `"`+addr+`"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, build(t, "./"+dir), addr, "DATABASE_URL="+testdb.SchemaURL(t, testdb.Schema(t)))
	url := "http://" + addr + "/orders"
	for i, want := range []struct{ key, replayed string }{{"order-1", ""}, {"order-1", "true"}, {"order-2", ""}} {
		if status, replayed, _ := post(t, url, want.key); status != http.StatusOK || replayed != want.replayed {
			t.Fatalf("POST %d with %s: %d, replayed %q, want 200, %q", i, want.key, status, replayed, want.replayed)
		}
	}
	// What the program wrote reaches p.stderr through a pipe, copied by
	// another goroutine: all of it is there once the program has exited.
	_ = p.cmd.Process.Kill()
	<-p.done
	if n := strings.Count(p.stderr.String(), "placing an order"); n != 2 {
		t.Fatalf("the handler ran %d times for two keys:\n%s", n, p.stderr.String())
	}
}

// process is a program a test started.
type process struct {
	cmd    *exec.Cmd
	stderr *testlog.Buffer
	done   chan error // its exit status
}

// start runs bin with env added to the test's and waits until addr
// accepts connections; the process is killed when t ends, if still there.
func start(t *testing.T, bin, addr string, env ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin), stderr: &testlog.Buffer{}, done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { p.done <- p.cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-exited })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never listened on %s:\n%s", bin, addr, p.stderr.String())
		}
	}
}

// post sends a POST with an Idempotency-Key and returns the status, the
// Idempotent-Replayed header and the body.
func post(t *testing.T, url, key string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	req.Header.Set("Idempotency-Key", key)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
}

// Without DATABASE_URL the program says so, rather than letting pgx try
// the defaults (role "root" does not exist).
func TestQuickstartWithoutDatabaseURL(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(build(t, "."))
	cmd.Env = append(os.Environ(), "DATABASE_URL=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "DATABASE_URL is not set") {
		t.Fatalf("run without DATABASE_URL: %v\n%s", err, out)
	}
}

// build builds the package pkg and returns the binary.
func build(t *testing.T, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "program")
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The README's programs are these files, byte for byte: what a newcomer
// pastes is what the tests above compile and run.
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
