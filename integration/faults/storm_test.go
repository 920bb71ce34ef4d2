package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testhttp"
)

// TestStorm runs three demo instances on one database and sends 200
// concurrent clients at them, four per key for 50 keys. Every attempt goes
// to a random instance and gives up after a random timeout (the server sees
// the client vanish mid-request), and the client retries until it gets its
// 201. Asserted: exactly one invoice per key, every client of a key got the
// same invoice, and no 5xx other than the promised 503 with Retry-After.
func TestStorm(t *testing.T) {
	t.Parallel()
	const (
		instances = 3
		clients   = 200
		keys      = 50
		// stormPhase is how long clients time out at random.
		stormPhase = 12 * time.Second
	)
	dbURL, d := schemaDB(t, uniq("storm"))
	args := []string{"-lease", "5s", "-sweep-interval", "1s", "-wait", "300ms", "-log-level", "warn"}
	var demos []*demoproc.Process
	for range instances {
		demos = append(demos, demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: args}))
	}

	type keyCase struct {
		key, customer, body string
	}
	cases := make([]keyCase, keys)
	run := uniq("storm")
	for i := range cases {
		customer := fmt.Sprintf("%s-customer-%02d", run, i)
		// Bodies are fixed per key (a retry is the same request); the
		// handler's delay varies between keys so requests overlap.
		cases[i] = keyCase{key: fmt.Sprintf("%s-key-%02d", run, i), customer: customer, body: invoiceBody(customer, int64(100+i), rand.IntN(1200))}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		answered = make([][]Invoice, keys)
		errs     []string
		timeouts int
	)
	var wg sync.WaitGroup
	start := make(chan struct{})
	var began time.Time
	for c := range clients {
		k := c % keys
		wg.Add(1)
		go func() {
			defer wg.Done()
			kc := cases[k]
			client := testhttp.NewClient(0)
			<-start
			for ctx.Err() == nil {
				base := demos[rand.IntN(instances)].URL()
				timeout := 20*time.Millisecond + rand.N(1500*time.Millisecond)
				if time.Since(began) > stormPhase {
					// The storm is over: stragglers wait for their answer,
					// which bounds the test.
					timeout = 20 * time.Second
				}
				actx, acancel := context.WithTimeout(ctx, timeout)
				r, err := testhttp.Post(actx, client, base+"/invoices", kc.body, "Idempotency-Key", kc.key)
				acancel()
				mu.Lock()
				if err != nil {
					timeouts++
					mu.Unlock()
					time.Sleep(rand.N(100 * time.Millisecond))
					continue
				}
				statuses[r.Status]++
				switch {
				case r.Status == http.StatusCreated:
					var inv Invoice
					if err := json.Unmarshal(r.Body, &inv); err != nil {
						errs = append(errs, fmt.Sprintf("key %s: 201 with body %q: %v", kc.key, r.Body, err))
					}
					answered[k] = append(answered[k], inv)
					mu.Unlock()
					return
				case r.Status == http.StatusConflict:
				case r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") != "":
					// Promised: a claim lost under load, or a store call
					// that timed out. Retried like a 409.
				default:
					errs = append(errs, fmt.Sprintf("key %s: unexpected %d %s", kc.key, r.Status, r.Body))
					mu.Unlock()
					return
				}
				mu.Unlock()
				time.Sleep(rand.N(100 * time.Millisecond))
			}
		}()
	}
	began = time.Now()
	close(start)
	wg.Wait()
	t.Logf("storm: %d clients on %d instances, %d keys, done in %v; answers by status %v; %d attempts timed out on the client",
		clients, instances, keys, time.Since(began).Round(time.Millisecond), statuses, timeouts)
	if len(errs) > 0 {
		t.Fatalf("%d unexpected answers, first: %s", len(errs), errs[0])
	}
	if ctx.Err() != nil {
		t.Fatalf("not every client got its 201 within the bound (%v)", ctx.Err())
	}
	for s := range statuses {
		if s >= 500 && s != http.StatusServiceUnavailable {
			t.Fatalf("a client got %d", s)
		}
	}

	for i, kc := range cases {
		invs := d.invoicesOf(kc.customer)
		if len(invs) != 1 {
			t.Errorf("key %s: %d invoices, want exactly 1", kc.key, len(invs))
			continue
		}
		if len(answered[i]) != clients/keys {
			t.Errorf("key %s: %d clients answered, want %d", kc.key, len(answered[i]), clients/keys)
		}
		for _, inv := range answered[i] {
			if inv != invs[0] {
				t.Errorf("key %s: a client was answered %+v, the invoice is %+v", kc.key, inv, invs[0])
			}
		}
	}
	if n := d.count(`SELECT count(*) FROM idemdemo_invoices WHERE customer LIKE $1 || '%'`, run); n != keys {
		t.Errorf("%d invoices in all, want %d", n, keys)
	}
	if n := d.count(`SELECT count(*) FROM idem_keys WHERE state = 'completed' AND key LIKE 'key/' || $1 || '%'`, run); n != keys {
		t.Errorf("%d completed keys, want %d", n, keys)
	}
	for _, p := range demos {
		if !p.Alive() {
			t.Errorf("an instance died during the storm")
		}
		if strings.Contains(p.Stderr().String(), "panic") {
			t.Errorf("an instance logged a panic:\n%s", p.Stderr().String())
		}
	}
}
