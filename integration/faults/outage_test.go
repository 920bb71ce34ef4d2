package faults_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testhttp"
)

// TestDatabaseOutage crashes the demo's PostgreSQL (pg_ctl stop -m
// immediate, a private server) under load, keeps it down longer than a
// lease, and starts it again. Asserted: during the outage new requests are
// answered 503 problem+json with Retry-After and their handler never runs
// (no claim, no invoice); the same demo process recovers without a restart;
// every key under load ends with exactly one invoice; results recorded
// before the outage replay byte for byte afterwards.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	s := testdb.StartServer(t)
	d := openDB(t, s.URL)
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: s.URL, Args: []string{
		"-lease", "2s", "-sweep-interval", "1s", "-wait", "300ms", "-log-level", "warn",
	}})

	run := uniq("outage")
	// Results recorded before the outage.
	type recorded struct{ key, body string }
	var before []recorded
	var beforeAnswers []testhttp.Response
	for i := range 5 {
		rc := recorded{key: fmt.Sprintf("%s-before-%d", run, i), body: invoiceBody(fmt.Sprintf("%s-before-%d", run, i), 100, 0)}
		r := mustPost(t, p.URL(), "/invoices", rc.body, "Idempotency-Key", rc.key)
		if r.Status != http.StatusCreated {
			t.Fatalf("before the outage: %d %s", r.Status, r.Body)
		}
		before = append(before, rc)
		beforeAnswers = append(beforeAnswers, r)
	}

	// Load: clients that retry until they get their 201, across the outage.
	const loaders = 20
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var (
		mu            sync.Mutex
		statuses      = map[int]int{}
		noRetryAfter  []string
		loadInvoices  = make([]Invoice, loaders)
		loadErrs      []string
		wg            sync.WaitGroup
		startedLoaded = make(chan struct{}, loaders)
	)
	for i := range loaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, customer := fmt.Sprintf("%s-load-%02d", run, i), fmt.Sprintf("%s-load-%02d", run, i)
			body := invoiceBody(customer, 200, 100+i*40)
			c := testhttp.NewClient(0)
			first := true
			for ctx.Err() == nil {
				actx, acancel := context.WithTimeout(ctx, 10*time.Second)
				r, err := testhttp.Post(actx, c, p.URL()+"/invoices", body, "Idempotency-Key", key)
				acancel()
				if first {
					first = false
					startedLoaded <- struct{}{}
				}
				if err != nil {
					mu.Lock()
					loadErrs = append(loadErrs, err.Error())
					mu.Unlock()
					return
				}
				mu.Lock()
				statuses[r.Status]++
				if r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
					noRetryAfter = append(noRetryAfter, string(r.Body))
				}
				mu.Unlock()
				switch r.Status {
				case http.StatusCreated:
					inv, err := parseInvoice(r.Body)
					mu.Lock()
					if err != nil {
						loadErrs = append(loadErrs, err.Error())
					}
					loadInvoices[i] = inv
					mu.Unlock()
					return
				case http.StatusConflict, http.StatusServiceUnavailable:
					time.Sleep(100 * time.Millisecond)
				default:
					mu.Lock()
					loadErrs = append(loadErrs, fmt.Sprintf("key %s: %d %s", key, r.Status, r.Body))
					mu.Unlock()
					return
				}
			}
		}()
	}
	// Crash the database while the first requests are in flight.
	<-startedLoaded
	s.Stop("immediate")

	// During the outage, new requests are refused with 503 and
	// Retry-After, and their handler does not run.
	var probes []string
	outageEnd := time.Now().Add(3 * time.Second) // longer than the lease
	for i := 0; time.Now().Before(outageEnd) || i < 3; i++ {
		key := fmt.Sprintf("%s-probe-%d", run, i)
		probes = append(probes, key)
		r := mustPost(t, p.URL(), "/invoices", invoiceBody(key, 300, 0), "Idempotency-Key", key)
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("during the outage: %d, Retry-After %q, Content-Type %q, body %s; want 503 problem+json with Retry-After",
				r.Status, r.Header.Get("Retry-After"), r.Header.Get("Content-Type"), r.Body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !p.Alive() {
		t.Fatal("the demo died during the outage")
	}
	if r := healthz(t, p); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("/healthz during the outage: %d %s, want 503", r.Status, r.Body)
	}

	s.Start()
	waitFor(t, "/healthz to report the database back", time.Minute, func() bool { return healthz(t, p).Status == http.StatusOK })
	wg.Wait()
	t.Logf("outage: load answers by status %v; %d probes refused", statuses, len(probes))
	if len(loadErrs) > 0 {
		t.Fatalf("%d load clients failed, first: %s", len(loadErrs), loadErrs[0])
	}
	if len(noRetryAfter) > 0 {
		t.Errorf("%d 503 answers without Retry-After, first: %s", len(noRetryAfter), noRetryAfter[0])
	}
	if !p.Alive() {
		t.Fatal("the demo died; it must recover without a restart")
	}

	for i := range loaders {
		customer := fmt.Sprintf("%s-load-%02d", run, i)
		invs := d.invoicesOf(customer)
		if len(invs) != 1 || invs[0] != loadInvoices[i] {
			t.Errorf("key %s: invoices %+v, the client was answered %+v; want exactly that one", customer, invs, loadInvoices[i])
		}
	}
	for _, key := range probes {
		if rs := d.keyRows(key); len(rs) != 0 {
			t.Errorf("probe %s refused during the outage left a row %+v", key, rs)
		}
		if invs := d.invoicesOf(key); len(invs) != 0 {
			t.Errorf("probe %s refused during the outage created invoices %+v", key, invs)
		}
	}
	for i, rc := range before {
		r := mustPost(t, p.URL(), "/invoices", rc.body, "Idempotency-Key", rc.key)
		if r.Status != beforeAnswers[i].Status || !bytes.Equal(r.Body, beforeAnswers[i].Body) || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("key %s recorded before the outage replays %d %q (replayed %q), want %d %q",
				rc.key, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"), beforeAnswers[i].Status, beforeAnswers[i].Body)
		}
	}
	if n := d.count(`SELECT count(*) FROM idemdemo_invoices`); n != len(before)+loaders {
		t.Errorf("%d invoices, want %d", n, len(before)+loaders)
	}
}

func healthz(t *testing.T, p *demoproc.Process) testhttp.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.URL()+"/healthz", nil)
	r, err := testhttp.Do(testhttp.NewClient(30*time.Second), req)
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	return r
}
