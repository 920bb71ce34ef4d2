package ha_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testhttp"
)

// checked is what the checks after a fault found.
type checked struct {
	answers  int
	inFlight int               // answers that took more than one attempt
	lost     map[string]string // by key: answered, and what a retry gets now
	// doubled: keys whose effect ran more than once (an invoice row per
	// run; an effect counted per run), with what was seen.
	doubled map[string]string
}

// check replays every answer through a random instance of its kind and
// compares it with what the client was answered; counts each key's
// invoices in the database and each key's effect runs; and waits until no
// claim is left (requests the clients abandoned when the load stopped end,
// or the sweeper releases them).
func check(t *testing.T, c *cluster, l *load, answers []answer, fx *effects) checked {
	t.Helper()
	res := checked{answers: len(answers), lost: map[string]string{}, doubled: map[string]string{}}
	for _, a := range answers {
		if a.attempts > 1 {
			res.inFlight++
		}
	}

	// Replays, four at a time.
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan answer)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := testhttp.NewClient(30 * time.Second)
			for a := range work {
				in := l.pick(a.kind)
				r, err := replay(hc, in, a)
				if err == nil && r.Status == a.status && bytes.Equal(r.Body, a.resp) && r.Header.Get("Idempotent-Replayed") == "true" {
					continue
				}
				mu.Lock()
				if err != nil {
					res.lost[a.key] = fmt.Sprintf("%s %s: answered %d %s; replay at %s: %v", a.kind, a.key, a.status, a.resp, in.name, err)
				} else {
					res.lost[a.key] = fmt.Sprintf("%s %s: answered %d %s by %s at %s (attempt %d, first sent %s); now at %s %d %s (replayed %q)",
						a.kind, a.key, a.status, a.resp, a.via, a.at.Format("15:04:05.000"), a.attempts, a.first.Format("15:04:05.000"),
						in.name, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"))
				}
				mu.Unlock()
			}
		}()
	}
	for _, a := range answers {
		work <- a
	}
	close(work)
	wg.Wait()

	pool := openPool(t, c.multiHostURL("idem-ha-check"))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT customer, id FROM idemdemo_invoices WHERE starts_with(customer, $1)`, l.run)
	if err != nil {
		t.Fatalf("reading invoices: %v", err)
	}
	invoices := map[string][]int64{}
	var customer string
	var id int64
	if _, err := pgx.ForEachRow(rows, []any{&customer, &id}, func() error {
		invoices[customer] = append(invoices[customer], id)
		return nil
	}); err != nil {
		t.Fatalf("reading invoices: %v", err)
	}
	l.mu.Lock()
	sent := make(map[string]kind, len(l.sent))
	for k, v := range l.sent {
		sent[k] = v
	}
	l.mu.Unlock()
	for key, k := range sent {
		switch n := 0; k {
		case invoice:
			if n = len(invoices[key]); n > 1 {
				res.doubled[key] = fmt.Sprintf("invoice %s: %d invoices %v", key, n, invoices[key])
			}
		case effect:
			if n = fx.count(key); n > 1 {
				res.doubled[key] = fmt.Sprintf("effect %s: ran %d times", key, n)
			}
		}
	}
	// An answered invoice is in the database with the id it was answered.
	for _, a := range answers {
		if a.kind != invoice {
			continue
		}
		if _, lost := res.lost[a.key]; lost {
			continue
		}
		want := invoiceID(a.resp)
		found := false
		for _, id := range invoices[a.key] {
			found = found || strconv.FormatInt(id, 10) == want
		}
		if !found {
			res.lost[a.key] = fmt.Sprintf("invoice %s: answered %s, replays, but the database has invoices %v", a.key, a.resp, invoices[a.key])
		}
	}

	end := time.Now().Add(30 * time.Second)
	for {
		var claimed int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_keys WHERE state = 'claimed'`).Scan(&claimed); err != nil {
			t.Fatal(err)
		}
		if claimed == 0 {
			break
		}
		if time.Now().After(end) {
			t.Errorf("%d claims still held 30s after the load stopped", claimed)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return res
}

// replay sends a's request again to in, retrying (the cluster may still
// settle) until an answer other than 409 or 5xx, for up to 30s.
func replay(hc *http.Client, in *instance, a answer) (testhttp.Response, error) {
	end := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r, err := testhttp.Post(ctx, hc, in.url+a.path, a.body, "Idempotency-Key", a.key)
		cancel()
		if (err == nil && r.Status != http.StatusConflict && r.Status < 500) || time.Now().After(end) {
			return r, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// invoiceID is the "id" of an invoice body, as text.
func invoiceID(body []byte) string {
	const field = `"id":`
	i := bytes.Index(body, []byte(field))
	if i < 0 {
		return ""
	}
	rest := body[i+len(field):]
	j := bytes.IndexAny(rest, ",}")
	if j < 0 {
		return ""
	}
	return string(bytes.TrimSpace(rest[:j]))
}

func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// sortedValues returns m's values in key order, for stable messages.
func sortedValues(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}
