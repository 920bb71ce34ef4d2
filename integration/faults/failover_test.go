package faults_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testhttp"
)

// TestFailover runs two demo instances on a primary with a streaming
// standby, under a load of new keys and retries of answered ones (each
// attempt at a random instance), and fails over mid-load:
// the standby is stopped (so that it lags) while clients keep sending, the
// primary is killed (pg_ctl stop -m immediate: no shutdown checkpoint, every
// connection cut), the standby is started again and promoted. The demos are
// not restarted: their DATABASE_URL names both servers with
// target_session_attrs=read-write, so every new connection (its pool's and
// its LISTEN connection's) goes to whichever accepts writes.
//
// With a synchronous standby (synchronous_standby_names) a commit is not
// acknowledged before the standby has it, so while it is stopped requests
// hang, and nothing a client was answered 2xx is lost. Asserted: every 2xx
// replays after the failover with the same body; no key has two invoices;
// every request in flight at the crash (its claim replicated, its completion
// not) is retried to completion, through a takeover once its lease ran out.
//
// With an asynchronous standby the primary acknowledges commits the standby
// does not have yet. Asserted, because it is what operators must know: the
// answers given while the standby lagged are lost with the primary (the key
// is absent on the new primary, and a retry runs the handler again, making
// a new invoice); the database itself stays consistent (one invoice per key
// in its own history). docs/operations.md says how to avoid it.
func TestFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sync bool
	}{
		{"synchronous", true},
		{"asynchronous", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			primary := testdb.StartLocalServer(t) // a standby needs its files (pg_basebackup)
			standby := primary.StartStandby("standby1")
			if tc.sync {
				// Set once the standby streams: until then every commit
				// would wait for it.
				primary.AlterSystem("synchronous_standby_names", "standby1")
			}
			dsn := fmt.Sprintf("postgres://idem@127.0.0.1:%d,127.0.0.1:%d/idem?sslmode=disable&target_session_attrs=read-write",
				primary.Port, standby.Port)
			// Two instances; every attempt goes to a random one.
			var bases []string
			for range 2 {
				bases = append(bases, demoproc.Start(t, demoproc.Config{DatabaseURL: dsn, Args: []string{
					"-lease", "2s", "-sweep-interval", "1s", "-wait", "300ms", "-log-level", "warn",
				}}).URL())
			}
			l := startFailoverLoad(t, bases, 8)

			// Answers before the failover, replicated.
			l.waitAnswered(t, 40)
			// Everything answered so far is on the standby.
			replicated := l.answeredCount()
			primary.WaitReplicated("standby1")
			standby.Stop("fast")
			// Answers to commits the standby acknowledged before it stopped
			// may still be on their way to their clients.
			time.Sleep(300 * time.Millisecond)
			laggedFrom := l.answeredCount()
			if tc.sync {
				// Commits now wait for the standby: give requests time to
				// claim (replicated before the stop, or waiting too) and
				// hang in their completion.
				time.Sleep(time.Second)
			} else {
				// The primary keeps acknowledging what the standby misses.
				l.waitAnswered(t, laggedFrom+10)
			}
			acknowledgedWhileLagging := l.answeredCount() - laggedFrom
			primary.Stop("immediate")
			standby.Start()
			standby.Promote()
			t.Logf("%s: %d answers replicated, %d more before the standby stopped, %d while it was stopped",
				tc.name, replicated, laggedFrom-replicated, acknowledgedWhileLagging)

			// After the failover the load goes on: every client gets its
			// in-flight key answered and then some more.
			l.waitAnswered(t, l.answeredCount()+40)
			answers := l.stop(t)

			d := openDB(t, standby.URL)
			lost := map[string]string{} // by key
			for _, a := range l.changed {
				lost[a.key] = fmt.Sprintf("%s: answered %d %s, a retry during the load got another answer", a.key, a.status, a.resp)
			}
			for _, a := range answers {
				r := mustPost(t, bases[rand.IntN(len(bases))], "/invoices", a.body, "Idempotency-Key", a.key)
				invoices := d.invoicesOf(a.customer)
				if len(invoices) > 1 {
					t.Errorf("key %s has %d invoices after the failover: %+v", a.key, len(invoices), invoices)
				}
				if r.Status == a.status && bytes.Equal(r.Body, a.resp) && r.Header.Get("Idempotent-Replayed") == "true" {
					continue
				}
				lost[a.key] = fmt.Sprintf("%s: answered %d %s, now %d %s (replayed %q)",
					a.key, a.status, a.resp, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"))
			}
			var relost []string
			for _, a := range answers {
				if _, ok := lost[a.key]; ok && a.seq < replicated {
					relost = append(relost, lost[a.key])
				}
			}
			t.Logf("%s: %d answers checked after the failover, %d lost", tc.name, len(answers), len(lost))
			if len(relost) > 0 {
				t.Errorf("%d answers known to be on the standby were lost: %v", len(relost), relost)
			}
			if tc.sync {
				if acknowledgedWhileLagging > 0 {
					t.Errorf("%d requests were answered while the synchronous standby was down", acknowledgedWhileLagging)
				}
				for _, s := range lost {
					t.Errorf("synchronous standby: a 2xx answer was lost: %s", s)
				}
				if l.inFlightAtCrash == 0 {
					t.Errorf("no request was in flight at the crash: the test did not exercise in-flight claims")
				}
			} else if len(lost) == 0 {
				t.Errorf("asynchronous standby: %d answers given while it lagged, none lost: the test did not make it lag", acknowledgedWhileLagging)
			}
			// Requests the clients abandoned when the load stopped finish
			// (or their leases run out and the sweeper takes them).
			waitFor(t, "no claim left", 30*time.Second, func() bool {
				return d.count(`SELECT count(*) FROM idem_keys WHERE state = 'claimed'`) == 0
			})
		})
	}
}

// failoverAnswer is a 2xx a load client received.
type failoverAnswer struct {
	key, customer, body string
	status              int
	resp                []byte
	seq                 int // order in which answers arrived
}

// failoverLoad is clients sending new keys (80%) and retries of keys they
// were answered (20%) to demo instances chosen at random, each retrying a
// key until it gets a 2xx.
type failoverLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu              sync.Mutex
	answered        []failoverAnswer
	failures        testhttp.Failures
	changed         []failoverAnswer // answers a retry during the load got a different 2xx for
	inFlightAtCrash int              // keys that needed more than one attempt
}

func startFailoverLoad(t *testing.T, bases []string, clients int) *failoverLoad {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	l := &failoverLoad{cancel: cancel}
	run := uniq("failover")
	for c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			client := testhttp.NewClient(5 * time.Second)
			var mine []failoverAnswer
			for n := 0; ctx.Err() == nil; n++ {
				if len(mine) > 0 && rand.IntN(5) == 0 {
					a := mine[rand.IntN(len(mine))]
					r, err := testhttp.Post(ctx, client, bases[rand.IntN(len(bases))]+"/invoices", a.body, "Idempotency-Key", a.key)
					if err == nil && r.Status < 300 && (r.Status != a.status || !bytes.Equal(r.Body, a.resp)) {
						l.mu.Lock()
						l.changed = append(l.changed, a)
						l.mu.Unlock()
					}
					continue
				}
				customer := fmt.Sprintf("%s-c%d-%04d", run, c, n)
				a := failoverAnswer{key: customer, customer: customer, body: invoiceBody(customer, 100, rand.IntN(50))}
				for attempt := 0; ctx.Err() == nil; attempt++ {
					r, err := testhttp.Post(ctx, client, bases[rand.IntN(len(bases))]+"/invoices", a.body, "Idempotency-Key", a.key)
					if err == nil && r.Status < 300 {
						a.status, a.resp = r.Status, r.Body
						l.mu.Lock()
						a.seq = len(l.answered)
						l.answered = append(l.answered, a)
						if attempt > 0 {
							l.inFlightAtCrash++
						}
						l.mu.Unlock()
						mine = append(mine, a)
						break
					}
					if err == nil && r.Status != http.StatusConflict && r.Status < 500 {
						l.failures.Add(fmt.Sprintf("key %s: %d %s", a.key, r.Status, r.Body))
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

func (l *failoverLoad) answeredCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.answered)
}

func (l *failoverLoad) waitAnswered(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d answers", n), time.Minute, func() bool { return l.answeredCount() >= n })
}

// stop ends the load, waits for its clients, fails t on any client error,
// and returns every 2xx answer.
func (l *failoverLoad) stop(t *testing.T) []failoverAnswer {
	t.Helper()
	l.cancel()
	l.wg.Wait()
	if err := l.failures.Err(); err != nil {
		t.Fatal(err)
	}
	return l.answered
}
