package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }

// TestMinimalRuns builds the README's smallest program (on a free address
// instead of 127.0.0.1:8080) and runs it against PostgreSQL: a retry with
// the same key is answered without running the handler again, another key
// runs it.
func TestMinimalRuns(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	addr := testdb.FreeAddr(t)
	const fixed = `"127.0.0.1:8080"`
	if !strings.Contains(string(src), fixed) {
		t.Fatalf("main.go does not listen on %s", fixed)
	}
	// A directory beginning with _ is inside the module but outside ./...
	dir, err := os.MkdirTemp(".", "_run")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(strings.Replace(string(src), fixed, `"`+addr+`"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "minimal")
	if out, err := exec.Command("go", "build", "-o", bin, "./"+dir).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+testdb.SchemaURL(t, testdb.Schema(t)))
	var stderr demoproc.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program never listened on %s:\n%s", addr, stderr.String())
		}
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(key string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/orders", nil)
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST with %s: %d", key, resp.StatusCode)
		}
		return resp.Header.Get("Idempotent-Replayed")
	}
	if post("order-1") != "" || post("order-1") != "true" || post("order-2") != "" {
		t.Fatal("want a first run, a replay of it, and a run for another key")
	}
	if n := strings.Count(stderr.String(), "placing an order"); n != 2 {
		t.Fatalf("the handler ran %d times for two keys:\n%s", n, stderr.String())
	}
}
