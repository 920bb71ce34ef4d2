package ha_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// kind is what a protected request does.
type kind int

const (
	// invoice: the demo's POST /invoices, whose effect (the invoice row)
	// commits in the database with the recorded answer.
	invoice kind = iota
	// effect: POST /effects of an in-process service whose effect is
	// outside the database (a counter standing for a payment provider),
	// between the claim and its completion.
	effect
)

func (k kind) String() string {
	if k == invoice {
		return "invoice"
	}
	return "effect"
}

// The instances' lease: idem's default, 30 s, longer than a failover here
// (Patroni's ttl of 10 s, the promotion, HAProxy's checks: 10 to 16 s
// measured on a shared machine), as docs/operations.md asks, so that a
// completion the dying primary could not take is retried until the new one
// takes it; the wait, short, so that a duplicate of one in flight is
// answered 409 and retried.
const (
	instanceLease = idem.DefaultLease
	instanceWait  = 300 * time.Millisecond
)

// instance is one service instance under load, reaching the database
// through one client path.
type instance struct {
	name string // e.g. "invoice/haproxy"
	kind kind
	path string // "haproxy" or "multi-host"
	url  string // its base URL
	logs *testlog.Buffer
}

// startDemo starts an idemdemo process on databaseURL.
func startDemo(t *testing.T, path, databaseURL string) *instance {
	t.Helper()
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: databaseURL, Args: []string{
		"-lease", instanceLease.String(), "-wait", instanceWait.String(), "-sweep-interval", "1s",
	}})
	return &instance{name: "invoice/" + path, kind: invoice, path: path, url: p.URL(), logs: p.Stderr()}
}

// effects is the outside world the effect instances act on: it counts how
// often each request's effect ran, as a payment provider's ledger would.
type effects struct {
	mu   sync.Mutex
	runs map[string]int // by the request's name
	seq  int64
}

func newEffects() *effects { return &effects{runs: map[string]int{}} }

// effectRequest is the body of POST /effects.
type effectRequest struct {
	Name    string `json:"name"`
	DelayMS int    `json:"delay_ms"`
}

// effectAnswer is its 201: seq numbers every run of any effect, so that an
// effect run twice answers differently.
type effectAnswer struct {
	Name string `json:"name"`
	Seq  int64  `json:"seq"`
}

func (fx *effects) handler(w http.ResponseWriter, r *http.Request) {
	var req effectRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	time.Sleep(time.Duration(req.DelayMS) * time.Millisecond)
	fx.mu.Lock()
	fx.runs[req.Name]++
	fx.seq++
	a := effectAnswer{Name: req.Name, Seq: fx.seq}
	fx.mu.Unlock()
	b, _ := json.Marshal(a)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(b)
}

// count returns how often name's effect ran.
func (fx *effects) count(name string) int {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.runs[name]
}

// startEffects runs an effect instance in this process: the middleware
// over pgstore (with its replay cache and LISTEN connection, as the demo
// has) on its own pool to databaseURL, in front of fx.
func startEffects(t *testing.T, path, databaseURL string, fx *effects) *instance {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	store, err := pgstore.New(pool, pgstore.Options{Lease: instanceLease, Logger: logger, ReplayCacheBytes: 16 << 20, SweepInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	protect := middleware.New(store, middleware.Options{Engine: engine.Options{Lease: instanceLease, Wait: instanceWait, Logger: logger}})
	mux := http.NewServeMux()
	mux.Handle("POST /effects", protect(http.HandlerFunc(fx.handler)))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		store.Close()
		pool.Close()
		if t.Failed() {
			t.Logf("effect/%s logs:\n%s", path, logs.String())
		}
	})
	return &instance{name: "effect/" + path, kind: effect, path: path, url: srv.URL, logs: logs}
}

// migrate creates idem's table before any instance starts (the demo
// migrates too, under goose's lock).
func migrate(t *testing.T, databaseURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
}

// startInstances starts, for each client path, a demo instance and an
// effect instance.
func startInstances(t *testing.T, c *cluster, fx *effects) []*instance {
	t.Helper()
	migrate(t, c.multiHostURL("idem-ha-migrate"))
	var out []*instance
	for _, p := range []struct{ path, url string }{
		{"haproxy", c.haproxyURL("idem-ha-demo")},
		{"multi-host", c.multiHostURL("idem-ha-demo")},
	} {
		out = append(out, startDemo(t, p.path, p.url))
	}
	for _, p := range []struct{ path, url string }{
		{"haproxy", c.haproxyURL("idem-ha-effects")},
		{"multi-host", c.multiHostURL("idem-ha-effects")},
	} {
		out = append(out, startEffects(t, p.path, p.url, fx))
	}
	return out
}

// requestBody is the body of a new request of kind k named name (the
// invoice's customer, or the effect's name).
func requestBody(k kind, name string, delayMS int) (path, body string) {
	if k == invoice {
		b, _ := json.Marshal(map[string]any{"customer": name, "amount_cents": 100, "delay_ms": delayMS})
		return "/invoices", string(b)
	}
	b, _ := json.Marshal(effectRequest{Name: name, DelayMS: delayMS})
	return "/effects", string(b)
}

func (i *instance) String() string { return fmt.Sprintf("%s (%s)", i.name, i.url) }
