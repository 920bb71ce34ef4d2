package testdb

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// errorRecorder is a testing.TB whose Errorf, Fatalf and Skip are
// recorded, not reported; unlike testing.T's, its Fatalf and Skip return.
type errorRecorder struct {
	testing.TB
	errors []string
	skips  []string
}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *errorRecorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

func (r *errorRecorder) Skip(args ...any) { r.skips = append(r.skips, fmt.Sprint(args...)) }

// A connection left acquired fails the test that left it, by name and
// within the wait, instead of hanging the binary in pgxpool's Close; once
// released, the close that went on in the background ends.
func TestClosePoolReportsAConnectionLeftAcquired(t *testing.T) {
	schema := Schema(t)
	pool, err := pgxpool.NewWithConfig(t.Context(), Config(t, schema))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	rec := &errorRecorder{TB: t}
	closePool(rec, pool, 200*time.Millisecond)
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "1 connection(s) still acquired") {
		t.Fatalf("closePool reported %q, want one error naming 1 acquired connection", rec.errors)
	}

	conn.Release()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for pool.Stat().TotalConns() > 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("the pool kept %d connection(s) after the last was released", pool.Stat().TotalConns())
		case <-time.After(10 * time.Millisecond):
		}
	}

	// A pool with nothing acquired closes within the wait, silently.
	quiet, err := pgxpool.NewWithConfig(t.Context(), Config(t, schema))
	if err != nil {
		t.Fatal(err)
	}
	rec = &errorRecorder{TB: t}
	closePool(rec, quiet, 10*time.Second)
	if len(rec.errors) != 0 {
		t.Fatalf("closePool of an idle pool reported %q", rec.errors)
	}
}
