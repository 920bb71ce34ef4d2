package pgconnect

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestUnresolvableHost: a host name that does not resolve is one line,
// naming the host once, although pgx tries it once per TLS fallback and
// joins the errors over several lines.
func TestUnresolvableHost(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://idem:secret@db.invalid:5432/app") // sslmode=prefer: two attempts
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.LookupFunc = func(ctx context.Context, host string) ([]string, error) {
		return nil, &net.DNSError{Err: "no such host", Name: host, Server: "10.0.0.53:53", IsNotFound: true}
	}
	_, err = Open(t.Context(), cfg, 5*time.Second)
	const want = `cannot connect to PostgreSQL at db.invalid:5432 (user "idem", database "app"): cannot resolve host "db.invalid": no such host`
	if err == nil || err.Error() != want {
		t.Fatalf("Open: %v\nwant %s", err, want)
	}
}

// TestOneLine: whatever pgx's error, the message is one line.
func TestOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"a", "a"},
		{"failed:\n\tx\n\tx\n\ty", "failed: x; y"},
	} {
		if got := oneLine(tc.in); got != tc.want {
			t.Errorf("oneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
