// Package faults_test proves idem's promises under faults, with real
// processes and a real PostgreSQL: the demo service (cmd/idemdemo) is built
// once, run as child processes, killed with SIGKILL at chosen points,
// restarted, stormed by concurrent clients, and cut off from its database;
// a few cases that need a store that misbehaves run the middleware over
// pgstore in this process. docs/reliability.md maps each fault to the test
// that proves it.
//
// Run with: cd integration && go test -race ./faults/
// It needs TEST_DATABASE_URL (a superuser: tests create roles) and
// PostgreSQL's server binaries for the private servers of the outage and
// commit cases; without them it is skipped locally and fails in CI.
package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/integration/internal/pgcontainer"
	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testhttp"
)

func TestMain(m *testing.M) {
	// Without -race: the storm runs three instances on two cores, and the
	// demo's own tests run it with the race detector already.
	os.Exit(demoproc.Main(pgcontainer.Main(m), false, nil))
}

// mustPost is post for a test that expects an answer.
func mustPost(t testing.TB, base, path, body string, header ...string) testhttp.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r, err := testhttp.Post(ctx, testhttp.NewClient(time.Minute), base+path, body, header...)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return r
}

// retryUntilAnswered is a client that retries POST /invoices with key
// until it gets an answer other than 409 or 5xx (connection errors included:
// the process may be down), as a well-behaved client would, and returns it.
// It fails t after the deadline.
func retryUntilAnswered(t testing.TB, base, key, body string, deadline time.Duration) testhttp.Response {
	t.Helper()
	c := testhttp.NewClient(30 * time.Second)
	end := time.Now().Add(deadline)
	var last string
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		r, err := testhttp.Post(ctx, c, base+"/invoices", body, "Idempotency-Key", key)
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case r.Status == http.StatusConflict || r.Status >= 500:
			last = fmt.Sprintf("%d %s", r.Status, r.Body)
		default:
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("key %s: no answer within %v; last: %s", key, deadline, last)
	return testhttp.Response{}
}

// Invoice is the demo's invoice JSON.
type Invoice struct {
	ID          int64  `json:"id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

func decodeInvoice(t testing.TB, r testhttp.Response) Invoice {
	t.Helper()
	var inv Invoice
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&inv); err != nil {
		t.Fatalf("invoice body %q: %v", r.Body, err)
	}
	return inv
}

// db is a test's connection to its schema (or private server) for
// assertions on the idem table and the invoices.
type db struct {
	t    testing.TB
	pool *pgxpool.Pool
}

// schema returns the schema the connection works in.
func (d *db) schema() string {
	d.t.Helper()
	var s string
	if err := d.pool.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&s); err != nil {
		d.t.Fatal(err)
	}
	return s
}

// schemaDB returns TEST_DATABASE_URL with search_path set to a fresh schema
// (dropped when t ends) and application_name set to app, and a db on it.
func schemaDB(t testing.TB, app string) (string, *db) {
	t.Helper()
	u := testdb.WithApp(t, testdb.SchemaURL(t, testdb.Schema(t)), app)
	return u, openDB(t, u)
}

func openDB(t testing.TB, rawURL string) *db {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	// The test's own queries are not the demo's.
	cfg.ConnConfig.RuntimeParams["application_name"] = "faults-test"
	cfg.MaxConns = 4
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &db{t: t, pool: pool}
}

// row is the idem table's row of a key (the middleware's header keys are
// stored as "key/<key>").
type row struct {
	state      string
	generation int64
	takeover   bool
	leaseEnd   *time.Time
	createdAt  time.Time
	result     []byte
}

// keyRows returns the rows whose stored key is "key/"+key, in any scope.
func (d *db) keyRows(key string) []row {
	d.t.Helper()
	rows, err := d.pool.Query(context.Background(),
		`SELECT state, generation, takeover, lease_end, created_at, coalesce(result::text, '') FROM idem_keys WHERE key = $1`, "key/"+key)
	if err != nil {
		d.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.state, &x.generation, &x.takeover, &x.leaseEnd, &x.createdAt, &x.result)
		return x, err
	})
	if err != nil {
		d.t.Fatal(err)
	}
	return out
}

// keyRow returns the one row of key, failing t unless there is exactly one.
func (d *db) keyRow(key string) row {
	d.t.Helper()
	rs := d.keyRows(key)
	if len(rs) != 1 {
		d.t.Fatalf("key %s has %d rows in idem_keys, want 1", key, len(rs))
	}
	return rs[0]
}

// waitInFlight waits until the request for key runs under its claim: its
// row claimed (the two-phase path), or, on the one-commit path, where the
// claim is invisible until the commit, a transaction of app's connections
// open and idle (the handler waiting out its delay_ms).
func (d *db) waitInFlight(app, key string, oneCommit bool) {
	d.t.Helper()
	waitFor(d.t, "the request for "+key+" to be in flight", time.Minute, func() bool {
		if oneCommit {
			return d.count(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'`, app) > 0
		}
		rs := d.keyRows(key)
		return len(rs) == 1 && rs[0].state == "claimed"
	})
}

// paths are POST /invoices's two ways to claim, with the demo's flag for
// each.
var paths = []struct {
	name      string
	oneCommit bool
	args      []string
}{{"two-phase", false, []string{"-two-phase"}}, {"one-commit", true, nil}}

// now is the database clock's now.
func (d *db) now() time.Time {
	d.t.Helper()
	var t time.Time
	if err := d.pool.QueryRow(context.Background(), `SELECT statement_timestamp()`).Scan(&t); err != nil {
		d.t.Fatal(err)
	}
	return t
}

// count runs a count(*) query.
func (d *db) count(query string, args ...any) int {
	d.t.Helper()
	var n int
	if err := d.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		d.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// invoicesOf returns the invoices of customer, from the database.
func (d *db) invoicesOf(customer string) []Invoice {
	d.t.Helper()
	rows, err := d.pool.Query(context.Background(),
		`SELECT id, customer, amount_cents FROM idemdemo_invoices WHERE customer = $1 ORDER BY id`, customer)
	if err != nil {
		d.t.Fatal(err)
	}
	invs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Invoice, error) {
		var inv Invoice
		err := r.Scan(&inv.ID, &inv.Customer, &inv.AmountCents)
		return inv, err
	})
	if err != nil {
		d.t.Fatal(err)
	}
	return invs
}

// waitFor polls cond every 20ms until it holds, failing t after deadline.
func waitFor(t testing.TB, what string, deadline time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", deadline, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitForBackend waits until a backend of application app runs a query
// starting with prefix and waits on wait_event (empty: any state).
func (d *db) waitForBackend(app, prefix, waitEvent string) {
	d.t.Helper()
	waitFor(d.t, fmt.Sprintf("a %s backend in %q waiting on %q", app, prefix, waitEvent), time.Minute, func() bool {
		return d.count(`SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE $2 || '%' AND ($3 = '' OR wait_event = $3)`,
			app, prefix, waitEvent) > 0
	})
}

// uniq returns a name unique to this run, for keys and customers.
func uniq(prefix string) string {
	return fmt.Sprintf("%s-%d-%08x", prefix, time.Now().UnixNano(), rand.Uint32())
}

// invoiceBody is a POST /invoices body.
func invoiceBody(customer string, amount int64, delayMS int) string {
	b, _ := json.Marshal(map[string]any{"customer": customer, "amount_cents": amount, "delay_ms": delayMS})
	return string(b)
}

// parseInvoice decodes an invoice body strictly, for goroutines that cannot
// fail the test themselves.
func parseInvoice(body []byte) (Invoice, error) {
	var inv Invoice
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&inv); err != nil {
		return inv, fmt.Errorf("invoice body %q: %w", body, err)
	}
	return inv, nil
}
