package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testdb"
)

// demoBinary is the idemdemo binary TestMain builds once for every test
// that runs the demo as a process.
var demoBinary string

func TestMain(m *testing.M) {
	os.Exit(demoproc.Main(testdb.Main(m), true, &demoBinary))
}

// demo is a running idemdemo process and a client for it.
type demo struct {
	*demoproc.Process
	t      *testing.T
	client *http.Client
}

// startDemo runs the demo with args on a free port, with DATABASE_URL set
// to databaseURL (empty: unset), and waits until it listens. It is stopped
// (SIGTERM) when t ends, if it has not been already.
func startDemo(t *testing.T, databaseURL string, args ...string) *demo {
	t.Helper()
	p := demoproc.Start(t, demoproc.Config{
		Binary:      demoBinary,
		DatabaseURL: databaseURL,
		Args:        append([]string{"-log-level", "debug"}, args...),
	})
	return &demo{
		Process: p,
		t:       t,
		// No keep-alive: no idle connection outlives a test (goleak).
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute},
	}
}

// response is what a test keeps of an HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (d *demo) do(method, path, key string, body string, header ...string) response {
	d.t.Helper()
	req, err := http.NewRequest(method, d.URL()+path, strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (d *demo) invoices() []Invoice {
	d.t.Helper()
	r := d.do("GET", "/invoices", "", "")
	if r.status != http.StatusOK {
		d.t.Fatalf("GET /invoices: %d %s", r.status, r.body)
	}
	var invs []Invoice
	if err := json.Unmarshal(r.body, &invs); err != nil {
		d.t.Fatalf("GET /invoices: %v in %s", err, r.body)
	}
	return invs
}

// pgURL returns TEST_DATABASE_URL with search_path set to a fresh schema,
// dropped when t ends, and a connection on it for assertions.
func pgURL(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	return schemaConn(t, testdb.Schema(t))
}

// schemaConn returns TEST_DATABASE_URL with search_path set to schema, and
// a connection on it for assertions.
func schemaConn(t *testing.T, schema string) (string, *pgx.Conn) {
	t.Helper()
	// Names the demo's connections, for waitForInFlight.
	u := testdb.WithApp(t, testdb.SchemaURL(t, schema), schema)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return u, conn
}

// waitForInFlight waits until a request for key is running under its
// claim: a two-phase claim of key committed ("claimed"), or, for POST
// /invoices, which claims inside its transaction (invisible until it
// commits), a transaction of the schema's connections open and idle (the
// handler waiting out its delay_ms). The schema's connections are the ones
// named like it (schemaURL) or logged in as its role (through the pooler).
func waitForInFlight(t *testing.T, conn *pgx.Conn, key string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var state string
		var open bool
		err := conn.QueryRow(t.Context(), `
			SELECT coalesce((SELECT state FROM idem_keys WHERE key = $1), ''),
			       EXISTS (SELECT FROM pg_stat_activity
			                WHERE current_schema() IN (application_name, usename) AND state = 'idle in transaction')`,
			key).Scan(&state, &open)
		if err != nil {
			t.Fatal(err)
		}
		if state == "claimed" || open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request for %s in flight after a minute (its row is %q)", key, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitForState polls the idem table until key is in state ("claimed",
// "completed") or absent (""), for at most a minute.
func waitForState(t *testing.T, conn *pgx.Conn, key, state string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var got string
		err := conn.QueryRow(t.Context(), `SELECT state FROM idem_keys WHERE key = $1`, key).Scan(&got)
		if errors.Is(err, pgx.ErrNoRows) {
			got, err = "", nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if got == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s is %q, want %q", key, got, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustStatus(t *testing.T, what string, r response, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.status, want, r.body)
	}
}

func problemType(t *testing.T, r response) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, r.body)
	}
	var p struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body: %v in %s", err, r.body)
	}
	return p.Type
}

// dialProxy is a TCP proxy to target that the test can cut, to take the
// database away from the demo without touching the shared server.
type dialProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, target string) *dialProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dialProxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

// cut closes the listener and every connection: the database is gone.
func (p *dialProxy) cut() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
