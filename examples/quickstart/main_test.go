package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testdb.Main(m)) }

// TestQuickstart runs the README's program against PostgreSQL: a retry gets
// the first answer and creates no second payment; another key pays again.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	u, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	ctx := context.Background()
	handler, shutdown, err := setup(ctx, u.String())
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

	conn, err := pgx.Connect(ctx, u.String())
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
