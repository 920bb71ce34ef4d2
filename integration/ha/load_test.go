package ha_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testhttp"
)

// answer is a 2xx a client received.
type answer struct {
	kind     kind
	key      string // also the invoice's customer, or the effect's name
	path     string // the request path
	body     string
	status   int
	resp     []byte
	first    time.Time // when its first attempt was sent
	at       time.Time // when the 2xx arrived
	attempts int
	via      string // the instance that answered
	seq      int    // order of arrival
}

// probe is one write a prober sent: a new key to one instance.
type probe struct {
	sent, done time.Time
	ok         bool
}

// load is clients sending new keys (80%) and retries of keys they were
// answered (20%), each attempt to a random instance of the key's kind, each
// new key retried until it gets a 2xx; and one prober per instance writing
// a new key every probeEvery, to time when each client path writes again.
type load struct {
	instances []*instance
	run       string
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu       sync.Mutex
	answers  []answer
	sent     map[string]kind // every key ever sent
	failures testhttp.Failures
	changed  []string // a retry during the load got another 2xx
	probes   map[string][]probe
	pending  map[string]time.Time // keys being retried, by when their first attempt was sent
}

const probeEvery = 100 * time.Millisecond

func startLoad(t *testing.T, instances []*instance, run string, clients int) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	l := &load{instances: instances, run: run, cancel: cancel, sent: map[string]kind{}, probes: map[string][]probe{}, pending: map[string]time.Time{}}
	for c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.client(ctx, c)
		}()
	}
	for _, in := range instances {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.prober(ctx, in)
		}()
	}
	// A test that fails before stop still ends its clients.
	t.Cleanup(func() {
		cancel()
		l.wg.Wait()
	})
	return l
}

func (l *load) of(k kind) []*instance {
	var out []*instance
	for _, in := range l.instances {
		if in.kind == k {
			out = append(out, in)
		}
	}
	return out
}

func (l *load) client(ctx context.Context, c int) {
	// A request may hang while a primary waits for a standby that is
	// gone, or while its completion waits for a new primary: the client
	// gives up after a while and retries, as clients do.
	hc := testhttp.NewClient(30 * time.Second)
	var mine []answer
	for n := 0; ctx.Err() == nil; n++ {
		if len(mine) > 0 && rand.IntN(5) == 0 {
			a := mine[rand.IntN(len(mine))]
			in := l.pick(a.kind)
			r, err := testhttp.Post(ctx, hc, in.url+a.path, a.body, "Idempotency-Key", a.key)
			if err == nil && r.Status < 300 && (r.Status != a.status || !bytes.Equal(r.Body, a.resp)) {
				l.mu.Lock()
				l.changed = append(l.changed, fmt.Sprintf("%s %s: answered %d %s, a retry at %s got %d %s",
					a.kind, a.key, a.status, a.resp, in.name, r.Status, r.Body))
				l.mu.Unlock()
			}
			continue
		}
		k := kind(rand.IntN(2))
		a := answer{kind: k, key: fmt.Sprintf("%s-c%d-%05d", l.run, c, n), first: time.Now()}
		a.path, a.body = requestBody(k, a.key, rand.IntN(40))
		l.mu.Lock()
		l.sent[a.key] = k
		l.pending[a.key] = a.first
		l.mu.Unlock()
		for ctx.Err() == nil {
			a.attempts++
			in := l.pick(k)
			r, err := testhttp.Post(ctx, hc, in.url+a.path, a.body, "Idempotency-Key", a.key)
			if err == nil && r.Status < 300 {
				a.status, a.resp, a.at, a.via = r.Status, r.Body, time.Now(), in.name
				l.record(&a)
				mine = append(mine, a)
				break
			}
			if err == nil && r.Status != http.StatusConflict && r.Status < 500 {
				l.failures.Add(fmt.Sprintf("%s %s at %s: %d %s", k, a.key, in.name, r.Status, r.Body))
				return
			}
			sleep(ctx, 50*time.Millisecond)
		}
		// Two cores run the cluster too: leave it some.
		sleep(ctx, 10*time.Millisecond)
	}
}

func (l *load) prober(ctx context.Context, in *instance) {
	hc := testhttp.NewClient(2 * time.Second)
	for n := 0; ctx.Err() == nil; n++ {
		a := answer{kind: in.kind, key: fmt.Sprintf("%s-probe-%s-%05d", l.run, strings.ReplaceAll(in.name, "/", "-"), n), attempts: 1}
		a.path, a.body = requestBody(in.kind, a.key, 0)
		l.mu.Lock()
		l.sent[a.key] = in.kind
		l.mu.Unlock()
		a.first = time.Now()
		r, err := testhttp.Post(ctx, hc, in.url+a.path, a.body, "Idempotency-Key", a.key)
		p := probe{sent: a.first, done: time.Now(), ok: err == nil && r.Status < 300}
		if ctx.Err() != nil {
			return
		}
		if p.ok {
			a.status, a.resp, a.at, a.via = r.Status, r.Body, p.done, in.name
			l.record(&a)
		}
		l.mu.Lock()
		l.probes[in.name] = append(l.probes[in.name], p)
		l.mu.Unlock()
		sleep(ctx, time.Until(a.first.Add(probeEvery)))
	}
}

func (l *load) pick(k kind) *instance {
	ins := l.of(k)
	return ins[rand.IntN(len(ins))]
}

func (l *load) record(a *answer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, a.key)
	a.seq = len(l.answers)
	l.answers = append(l.answers, *a)
}

func (l *load) answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.answers)
}

func (l *load) waitAnswered(t *testing.T, n int, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for l.answered() < n {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %d answers (have %d)", d, n, l.answered())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settled reports whether every key whose first attempt was sent before
// at has been answered.
func (l *load) settled(at time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, first := range l.pending {
		if first.Before(at) {
			return false
		}
	}
	return true
}

// writesSince reports whether every instance answered n probes in a row
// that were sent after since.
func (l *load) writesSince(since time.Time, n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, in := range l.instances {
		ok := 0
		for _, p := range l.probes[in.name] {
			switch {
			case p.sent.Before(since):
			case p.ok:
				ok++
			default:
				ok = 0
			}
		}
		if ok < n {
			return false
		}
	}
	return true
}

// outage is what the probes of one instance saw from a fault at from until
// to: the first failed write, and the first successful write sent after the
// last failed one.
type outage struct {
	failed    int
	firstFail time.Time
	recovered time.Time // zero when no write failed
}

func (l *load) outage(instance string, from, to time.Time) outage {
	l.mu.Lock()
	defer l.mu.Unlock()
	var o outage
	var lastFail time.Time
	for _, p := range l.probes[instance] {
		if p.sent.Before(from) || p.sent.After(to) || p.ok {
			continue
		}
		o.failed++
		if o.firstFail.IsZero() {
			o.firstFail = p.sent
		}
		lastFail = p.sent
	}
	if o.failed == 0 {
		return o
	}
	for _, p := range l.probes[instance] {
		if p.ok && p.sent.After(lastFail) {
			o.recovered = p.done
			break
		}
	}
	return o
}

// stop ends the load, waits for its clients and returns every 2xx, failing
// t on a client error or an answer a retry changed.
func (l *load) stop(t *testing.T) []answer {
	t.Helper()
	l.cancel()
	l.wg.Wait()
	if err := l.failures.Err(); err != nil {
		t.Error(err)
	}
	return l.answers
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
