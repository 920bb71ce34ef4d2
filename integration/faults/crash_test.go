package faults_test

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testhttp"
)

// Short leases make abandoned claims run out quickly; the sweeper runs
// every second.
const (
	crashLease = 2 * time.Second
	crashSweep = time.Second
	// stuckSlack is what a key may stay stuck beyond lease plus one sweep
	// interval: process restart, client retry pacing and scheduling on a
	// loaded CI machine. Generous on purpose; it still catches a key stuck
	// until some much longer timeout.
	stuckSlack = 5 * time.Second
)

var crashArgs = []string{
	"-lease", crashLease.String(), "-sweep-interval", crashSweep.String(),
	"-wait", "500ms", "-log-level", "info", "-shutdown-timeout", "5s",
}

// twoPhaseCrashArgs run POST /invoices on the two-phase path: the claim
// commits on its own before the handler runs.
var twoPhaseCrashArgs = append([]string{"-two-phase"}, crashArgs...)

// oneCommitCrashArgs run it on the one-commit path (the demo's default),
// with a lease far longer than the test's slack: a retry that had to wait
// for it would show.
var oneCommitCrashArgs = []string{
	"-lease", "30s", "-sweep-interval", crashSweep.String(),
	"-wait", "500ms", "-log-level", "info", "-shutdown-timeout", "5s",
}

// TestCrashMatrix kills the demo with SIGKILL at each point of a request's
// life, restarts it on the same address, and has the client retry until it
// gets an answer. Each case asserts: exactly one invoice for the key; the
// answer is what an uninterrupted run returns (201, the same JSON shape
// and values, the committed invoice when the crash came after the commit);
// on the two-phase path, the key was not stuck longer than the lease plus
// one sweep interval; on the one-commit path, the crash left no row and
// the retry took the key at once.
func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	t.Run("two-phase: after the claim, before the side effect", func(t *testing.T) {
		t.Parallel()
		app := uniq("crash-claim")
		dbURL, d := schemaDB(t, app)
		p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: twoPhaseCrashArgs})
		ref := reference(t, p)

		key, customer := uniq("k"), uniq("c")
		body := invoiceBody(customer, 4200, 3000) // the handler sleeps: claimed, nothing written
		inFlight := sendInBackground(p.URL(), key, body)
		waitFor(t, "the key to be claimed", time.Minute, func() bool {
			rs := d.keyRows(key)
			return len(rs) == 1 && rs[0].state == "claimed"
		})
		p.Kill()
		inFlight.wait(t)
		leaseEnd := *d.keyRow(key).leaseEnd

		p = p.Restart()
		r := retryUntilAnswered(t, p.URL(), key, body, time.Minute)
		assertLikeReference(t, r, ref, customer, 4200)
		assertOneInvoice(t, d, customer, decodeInvoice(t, r))
		assertNotStuck(t, d, key, leaseEnd)
	})

	t.Run("one-commit: after the claim, before the side effect", func(t *testing.T) {
		t.Parallel()
		app := uniq("crash-claim-tx")
		dbURL, d := schemaDB(t, app)
		p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: oneCommitCrashArgs})
		ref := reference(t, p)

		key, customer := uniq("k"), uniq("c")
		body := invoiceBody(customer, 4200, 3000) // the handler sleeps in its transaction
		inFlight := sendInBackground(p.URL(), key, body)
		waitFor(t, "the claim's transaction to be open", time.Minute, func() bool {
			return d.count(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'`, app) > 0
		})
		p.Kill()
		inFlight.wait(t)
		killed := d.now()

		p = p.Restart()
		r := retryUntilAnswered(t, p.URL(), key, body, time.Minute)
		assertLikeReference(t, r, ref, customer, 4200)
		assertOneInvoice(t, d, customer, decodeInvoice(t, r))
		assertTakenAtOnce(t, d, key, killed)
	})

	for _, tc := range []struct {
		path string
		args []string
	}{{"two-phase", twoPhaseCrashArgs}, {"one-commit", oneCommitCrashArgs}} {
		t.Run(tc.path+": in the middle of the handler, its transaction open", func(t *testing.T) {
			t.Parallel()
			crashMidHandler(t, tc.args, tc.path == "one-commit")
		})
	}

	t.Run("after the business commit, before the response", func(t *testing.T) {
		t.Parallel()
		// A private server whose invoice commits wait for a synchronous
		// standby that does not exist: the commit is flushed locally (it
		// has happened) but never acknowledged, so the demo never writes
		// its response. The demo is killed there; the wait is then
		// released and the transaction becomes visible.
		s := testdb.StartServer(t)
		admin := openDB(t, s.URL)
		ctx := t.Context()
		for _, q := range []string{
			`ALTER SYSTEM SET synchronous_commit = 'local'`,
			`ALTER SYSTEM SET synchronous_standby_names = 'nobody'`,
			`SELECT pg_reload_conf()`,
		} {
			if _, err := admin.pool.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		waitFor(t, "the configuration to be reloaded", time.Minute, func() bool {
			conn, err := pgx.Connect(ctx, s.URL)
			if err != nil {
				return false
			}
			defer conn.Close(ctx)
			var v string
			return conn.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&v) == nil && v == "nobody"
		})
		app := uniq("crash-commit")
		p := demoproc.Start(t, demoproc.Config{DatabaseURL: testdb.WithApp(t, s.URL, app), Args: crashArgs})
		ref := reference(t, p) // before the trigger: this commit is not held
		d := admin
		for _, q := range []string{
			`CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
			 BEGIN PERFORM set_config('synchronous_commit', 'on', true); RETURN NEW; END $$`,
			`CREATE TRIGGER hold_commit BEFORE INSERT ON idemdemo_invoices FOR EACH ROW EXECUTE FUNCTION hold_commit()`,
		} {
			if _, err := admin.pool.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}

		key, customer := uniq("k"), uniq("c")
		body := invoiceBody(customer, 4200, 0)
		inFlight := sendInBackground(p.URL(), key, body)
		waitFor(t, "the invoice commit to wait for the standby", time.Minute, func() bool {
			return d.count(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'SyncRep'`, app) > 0
		})
		p.Kill()
		if r, err := inFlight.result(); err == nil {
			t.Fatalf("the client got an answer from a process killed before it answered: %d %s", r.Status, r.Body)
		}
		for _, q := range []string{`ALTER SYSTEM RESET synchronous_standby_names`, `SELECT pg_reload_conf()`} {
			if _, err := admin.pool.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		waitFor(t, "the held commit to complete", time.Minute, func() bool {
			rs := d.keyRows(key)
			return len(rs) == 1 && rs[0].state == "completed"
		})
		committed := d.invoicesOf(customer)
		if len(committed) != 1 {
			t.Fatalf("%d invoices committed before the response, want 1", len(committed))
		}

		p = p.Restart()
		r := retryUntilAnswered(t, p.URL(), key, body, time.Minute)
		assertLikeReference(t, r, ref, customer, 4200)
		if got := decodeInvoice(t, r); got != committed[0] {
			t.Fatalf("retry answered invoice %+v, want the committed %+v", got, committed[0])
		}
		if r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the retry was not a replay: headers %v", r.Header)
		}
		assertOneInvoice(t, d, customer, committed[0])
	})
}

// crashMidHandler kills the demo (started with args) while its handler is
// inside its transaction, blocked on a lock the test holds, and checks the
// retry. On the one-commit path the claim was in that transaction too:
// nothing is left once it rolls back, and the retry takes the key at once.
func crashMidHandler(t *testing.T, args []string, oneCommit bool) {
	app := uniq("crash-mid")
	dbURL, d := schemaDB(t, app)
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: args})
	ref := reference(t, p)

	// The test holds a lock that blocks the invoice INSERT: the
	// handler is inside its transaction when it is killed.
	ctx := t.Context()
	lock, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `LOCK TABLE idemdemo_invoices IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	key, customer := uniq("k"), uniq("c")
	body := invoiceBody(customer, 4200, 0)
	inFlight := sendInBackground(p.URL(), key, body)
	d.waitForBackend(app, "INSERT INTO idemdemo_invoices", "relation")
	p.Kill()
	inFlight.wait(t)
	var leaseEnd time.Time
	if !oneCommit {
		leaseEnd = *d.keyRow(key).leaseEnd
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The killed process's backend finishes its INSERT, finds its
	// client gone and rolls back.
	waitFor(t, "the killed process's backend to end", time.Minute, func() bool {
		return d.count(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'INSERT INTO idemdemo_invoices%' AND state <> 'idle'`, app) == 0
	})
	killed := d.now()

	p = p.Restart()
	r := retryUntilAnswered(t, p.URL(), key, body, time.Minute)
	assertLikeReference(t, r, ref, customer, 4200)
	assertOneInvoice(t, d, customer, decodeInvoice(t, r))
	if oneCommit {
		assertTakenAtOnce(t, d, key, killed)
	} else {
		assertNotStuck(t, d, key, leaseEnd)
	}
}

// assertTakenAtOnce checks, on the one-commit path, that the crash left no
// claim behind: the claim that completed the key was made (on the database
// clock) within the test's slack of the moment the killed process's
// transaction was gone, not after a lease. The demo's lease here is far
// longer than the slack.
func assertTakenAtOnce(t *testing.T, d *db, key string, gone time.Time) {
	t.Helper()
	final := d.keyRow(key)
	if final.state != "completed" {
		t.Fatalf("key %s is %s, want completed", key, final.state)
	}
	if late := final.createdAt.Sub(gone); late > stuckSlack {
		t.Fatalf("the key was taken %v after the crash, want at once (within %v): a claim was left behind", late, stuckSlack)
	}
}

// reference is what an uninterrupted run answers: a POST with a fresh key,
// for comparing shapes.
func reference(t *testing.T, p *demoproc.Process) testhttp.Response {
	t.Helper()
	r := mustPost(t, p.URL(), "/invoices", invoiceBody(uniq("ref"), 4200, 0), "Idempotency-Key", uniq("ref"))
	if r.Status != http.StatusCreated {
		t.Fatalf("reference POST: %d %s", r.Status, r.Body)
	}
	return r
}

// assertLikeReference checks that r is the answer an uninterrupted run gives
// for (customer, amount): same status, content type and JSON shape.
func assertLikeReference(t *testing.T, r, ref testhttp.Response, customer string, amount int64) {
	t.Helper()
	if r.Status != ref.Status {
		t.Fatalf("status %d, an uninterrupted run answers %d; body %s", r.Status, ref.Status, r.Body)
	}
	if got, want := r.Header.Get("Content-Type"), ref.Header.Get("Content-Type"); got != want {
		t.Fatalf("Content-Type %q, an uninterrupted run answers %q", got, want)
	}
	inv := decodeInvoice(t, r) // same members, nothing else
	decodeInvoice(t, ref)
	if inv.Customer != customer || inv.AmountCents != amount || inv.ID <= 0 {
		t.Fatalf("invoice %+v, want customer %q amount %d", inv, customer, amount)
	}
	if !bytes.HasSuffix(r.Body, []byte("\n")) || !bytes.HasSuffix(ref.Body, []byte("\n")) {
		t.Fatalf("bodies differ in framing: %q vs %q", r.Body, ref.Body)
	}
}

// assertOneInvoice checks that customer (unique to the key) has exactly one
// invoice, the one the client was answered with.
func assertOneInvoice(t *testing.T, d *db, customer string, answered Invoice) {
	t.Helper()
	invs := d.invoicesOf(customer)
	if len(invs) != 1 {
		t.Fatalf("%d invoices for the key, want exactly 1: %+v", len(invs), invs)
	}
	if invs[0] != answered {
		t.Fatalf("the client was answered %+v, but the invoice is %+v", answered, invs[0])
	}
}

// assertNotStuck checks, on the database clock, that the claim which
// finally completed the key was made no later than one sweep interval (plus
// slack) after the killed claim's lease ran out.
func assertNotStuck(t *testing.T, d *db, key string, killedLeaseEnd time.Time) {
	t.Helper()
	final := d.keyRow(key)
	if final.state != "completed" {
		t.Fatalf("key %s is %s, want completed", key, final.state)
	}
	if late := final.createdAt.Sub(killedLeaseEnd); late > crashSweep+stuckSlack {
		t.Fatalf("the key was retaken %v after the killed claim's lease ran out, want at most one sweep interval (%v) plus %v slack", late, crashSweep, stuckSlack)
	}
}

// background is a request sent in its own goroutine, which the test kills
// the server under.
type background struct {
	wg       sync.WaitGroup
	resp     testhttp.Response
	err      error
	answered time.Time // when the answer (or error) arrived
}

func sendInBackground(base, key, body string) *background {
	b := &background{}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		b.resp, b.err = testhttp.Post(ctx, testhttp.NewClient(2*time.Minute), base+"/invoices", body, "Idempotency-Key", key)
		b.answered = time.Now()
	}()
	return b
}

func (b *background) result() (testhttp.Response, error) {
	b.wg.Wait()
	return b.resp, b.err
}

// wait waits for the request and fails t if it was answered: the process
// was killed before it could answer.
func (b *background) wait(t *testing.T) {
	t.Helper()
	if r, err := b.result(); err == nil {
		t.Fatalf("a killed process answered: %d %s", r.Status, r.Body)
	}
}

// TestRestartReplaysByteForByte records answers (a 201 and a recorded 400),
// restarts the demo (SIGKILL, then SIGTERM) and checks that each replays
// with the same status, recorded headers and body bytes, without a new
// invoice.
func TestRestartReplaysByteForByte(t *testing.T) {
	t.Parallel()
	dbURL, d := schemaDB(t, uniq("durable"))
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: crashArgs})
	type recorded struct {
		key, body string
		first     testhttp.Response
	}
	customer := uniq("c")
	cases := []*recorded{
		{key: uniq("created"), body: invoiceBody(customer, 1999, 0)},
		{key: uniq("invalid"), body: `{"customer":"` + customer + `","amount_cents":0}`},
		{key: uniq("unicode"), body: invoiceBody(customer+" Ærøskøbing ✓ \u2028", 7, 0)},
	}
	for _, c := range cases {
		c.first = mustPost(t, p.URL(), "/invoices", c.body, "Idempotency-Key", c.key)
		if c.first.Status != http.StatusCreated && c.first.Status != http.StatusBadRequest {
			t.Fatalf("first answer %d %s", c.first.Status, c.first.Body)
		}
	}
	check := func(when string) {
		t.Helper()
		for _, c := range cases {
			r := mustPost(t, p.URL(), "/invoices", c.body, "Idempotency-Key", c.key)
			if r.Status != c.first.Status || !bytes.Equal(r.Body, c.first.Body) {
				t.Fatalf("%s: key %s replayed %d %q, first answer was %d %q", when, c.key, r.Status, r.Body, c.first.Status, c.first.Body)
			}
			for _, h := range []string{"Content-Type", "Content-Length"} {
				if r.Header.Get(h) != c.first.Header.Get(h) {
					t.Fatalf("%s: key %s replayed %s %q, first answer had %q", when, c.key, h, r.Header.Get(h), c.first.Header.Get(h))
				}
			}
			if r.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("%s: key %s was not replayed (headers %v)", when, c.key, r.Header)
			}
		}
		if n := d.count(`SELECT count(*) FROM idemdemo_invoices`); n != 2 {
			t.Fatalf("%s: %d invoices, want 2", when, n)
		}
	}
	check("before any restart")
	p.Kill()
	p = p.Restart()
	check("after SIGKILL and restart")
	p.Stop()
	p = p.Restart()
	check("after SIGTERM and restart")
}
