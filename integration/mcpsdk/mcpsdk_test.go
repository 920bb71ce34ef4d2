// Package mcpsdk drives the demo's MCP endpoint (mcphttp in front of
// go-sdk) with a client nobody here wrote: the official MCP TypeScript
// SDK's Client and StreamableHTTPClientTransport, in Node. It shows that
// what mcphttp promises holds for that client, at both protocol versions,
// with the in-memory store and with PostgreSQL.
//
// The SDK versions are pinned in client/package.json (and its lock):
// @modelcontextprotocol/sdk 1.32.2 speaks 2025-11-25 (sessions), its
// successor @modelcontextprotocol/client 2.4.0 is pinned to 2026-07-28 (no
// sessions, server/discover). client/client.mjs runs the scenarios; this
// test starts the demo (-wait 1s) and two TCP proxies in front of it that
// cut connections, runs the script, and counts each scenario's invoices at
// the demo (the side effects, which the client cannot see):
//
//   - discover: the extension io.github.idemkit/idempotency is advertised
//     (server/discover at 2026-07-28, initialize before);
//   - key in _meta, key in params, key in header: the retry (a new id) is
//     the replay, marked io.github.idemkit/replayed in its _meta; one
//     invoice;
//   - conflicting keys (_meta and header): -32602, no invoice;
//   - key reused with other arguments: -31090, data.type
//     idempotency_key_conflict; one invoice;
//   - duplicate in progress: a duplicate past the wait gets -31091, data.type
//     idempotency_key_in_progress; its retry the result; one invoice;
//   - connection dropped during the call (a proxy cuts it once the demo
//     has logged the claim of its key): the retry on a new connection is
//     the replay; one invoice;
//   - connection dropped mid-stream: a streaming call (progress
//     notifications) cut after its first event; the retry is the replay;
//   - two callers, one key (bearer tokens): two invoices, each retry its own;
//   - 2025-11-25 only: derived key, same-session retry (the same JSON-RPC
//     request sent again on the SDK's transport, no key): the replay;
//     session closed mid-call (the connection cut, then the SDK's
//     terminateSession): the retry from a new session is the replay;
//   - PostgreSQL only: replay after restart.
//
// It needs Node 22 and the pinned packages: `make test-mcp-sdk` installs
// both into .tools (scripts/mcp-sdk.sh) and runs this with MCP_SDK_DIR set.
// Without MCP_SDK_DIR the test is skipped (make test runs it that way); with
// MCP_SDK_REQUIRED set, as the make target does, a missing SDK fails it. It
// takes about 15 s on 2 cores (two stores in parallel, two SDKs each),
// the demo's build included.
package mcpsdk

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/internal/pgcontainer"
	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testdb"
)

func TestMain(m *testing.M) {
	if os.Getenv("MCP_SDK_DIR") == "" {
		os.Exit(m.Run()) // nothing to build: the test skips
	}
	os.Exit(demoproc.Main(pgcontainer.Main(m), false, nil))
}

// versions are the SDKs the script runs: the protocol revision each speaks.
var versions = []string{"2025-11-25", "2026-07-28"}

func TestTypeScriptSDK(t *testing.T) {
	dir := os.Getenv("MCP_SDK_DIR")
	if dir == "" {
		if os.Getenv("MCP_SDK_REQUIRED") != "" {
			t.Fatal("MCP_SDK_DIR is not set")
		}
		t.Skip("MCP_SDK_DIR not set: run `make test-mcp-sdk`, which installs Node and the pinned TypeScript SDK")
	}
	script := installScript(t, dir)
	node := os.Getenv("NODE")
	if node == "" {
		node = "node"
	}
	for _, store := range []string{"memory", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			dbURL := ""
			if store == "postgres" {
				dbURL = testdb.SchemaURL(t, testdb.Schema(t))
			}
			// At debug level the demo logs each claim with its key: the
			// proxy that cuts a call waits for it.
			d := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: []string{"-wait", "1s", "-log-level", "debug"}})
			logs := d.Stderr()
			claimed := func(key string) bool { return claimLogged(logs.String(), key) }
			cutCall := startProxy(t, d.URL(), cutAfterClaim, claimed)
			cutProgress := startProxy(t, d.URL(), cutAtProgress, nil)
			env := func(version, phase string) []string {
				return []string{
					"SDK_VERSION=" + version, "PHASE=" + phase, "RUN=" + store + " " + version,
					"DIRECT_URL=" + d.URL() + "/mcp", "CUT_CALL_URL=" + cutCall + "/mcp", "CUT_PROGRESS_URL=" + cutProgress + "/mcp",
				}
			}
			for _, version := range versions {
				t.Run(version, func(t *testing.T) {
					check(t, d.URL(), runScript(t, node, script, env(version, "main")))
				})
			}
			if store != "postgres" {
				return
			}
			for _, version := range versions {
				check(t, d.URL(), runScript(t, node, script, env(version, "before-restart")))
			}
			d.Stop()
			d = d.Restart()
			for _, version := range versions {
				t.Run(version+"/restart", func(t *testing.T) {
					check(t, d.URL(), runScript(t, node, script, env(version, "after-restart")))
				})
			}
		})
	}
}

// outcome is one line the script prints.
type outcome struct {
	Scenario string `json:"scenario"`
	OK       bool   `json:"ok"`
	Error    string `json:"error"`
	Customer string `json:"customer"`
	Invoices *int   `json:"invoices"`
	Ms       int    `json:"ms"`
}

// check fails t for each scenario that failed, and each whose customer does
// not have the invoices it should at the demo.
func check(t *testing.T, demoURL string, outcomes []outcome) {
	t.Helper()
	if len(outcomes) == 0 {
		t.Fatal("the script reported no scenario")
	}
	counts := invoiceCounts(t, demoURL)
	for _, o := range outcomes {
		failed := false
		if !o.OK {
			t.Errorf("%s: %s", o.Scenario, o.Error)
			failed = true
		}
		if o.Invoices != nil && counts[o.Customer] != *o.Invoices {
			t.Errorf("%s: %d invoices for %q, want %d", o.Scenario, counts[o.Customer], o.Customer, *o.Invoices)
			failed = true
		}
		if !failed {
			t.Logf("%s: ok (%d ms)", o.Scenario, o.Ms)
		}
	}
}

// invoiceCounts returns how many invoices each customer has at the demo.
func invoiceCounts(t *testing.T, demoURL string) map[string]int {
	t.Helper()
	resp, err := http.Get(demoURL + "/invoices")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var invoices []struct {
		Customer string `json:"customer"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&invoices); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, inv := range invoices {
		counts[inv.Customer]++
	}
	return counts
}

var scriptOnce sync.Once

// installScript copies client.mjs next to the SDK's node_modules in dir,
// where Node resolves its imports, and returns its path there.
func installScript(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "client.mjs")
	var err error
	scriptOnce.Do(func() {
		var src []byte
		if src, err = os.ReadFile(filepath.Join("client", "client.mjs")); err == nil {
			err = os.WriteFile(path, src, 0o644)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// runScript runs the scenarios of one phase and returns their outcomes.
func runScript(t *testing.T, node, script string, env []string) []outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	var outcomes []outcome
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var o outcome
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("the script printed %q: %v\nstderr: %s", sc.Text(), err, stderr.String())
		}
		outcomes = append(outcomes, o)
	}
	return outcomes
}

// cutMode decides when a proxied connection is cut.
type cutMode int

const (
	// cutAfterClaim cuts a connection once the demo has claimed the key of
	// a tools/call that went up it: the client loses the answer while the
	// tool runs. (A cut at a fixed time after the call could land before
	// the claim on a loaded machine; the tool then never ran, and the retry
	// was the first run, not a replay.)
	cutAfterClaim cutMode = iota
	// cutAtProgress cuts a connection once a progress notification came
	// down it: the client loses the rest of a streaming answer.
	cutAtProgress
)

// startProxy starts a TCP proxy in front of target (an http:// URL) that
// cuts connections as mode says, and returns its URL; claimed reports
// whether the demo has claimed a key (cutAfterClaim). It stops, with every
// connection, when t ends.
func startProxy(t *testing.T, target string, mode cutMode, claimed func(key string) bool) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", u.Host)
			if err != nil {
				client.Close()
				continue
			}
			track(client, true)
			track(server, true)
			var once sync.Once
			cut := func() {
				once.Do(func() {
					client.Close()
					server.Close()
					track(client, false)
					track(server, false)
				})
			}
			up, down := io.Discard, io.Discard
			if mode == cutAfterClaim {
				up = &keyWatch{seen: func(key string) {
					wg.Go(func() {
						if !waitFor(stop, func() bool { return claimed(key) }) {
							t.Errorf("the demo did not log the claim of %q within %s", key, claimWait)
						}
						cut()
					})
				}}
			} else {
				down = &watch{want: []byte("notifications/progress"), seen: cut}
			}
			wg.Go(func() { pipe(server, client, up, cut) })
			wg.Go(func() { pipe(client, server, down, cut) })
		}
	})
	return "http://" + ln.Addr().String()
}

// pipe copies from src to dst, showing each chunk to w after it is sent,
// and cuts both ends when either side ends.
func pipe(dst, src net.Conn, w io.Writer, cut func()) {
	defer cut()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// watch calls seen once when want has passed through it (within the last
// few kilobytes, so that a match split across chunks is found).
type watch struct {
	want []byte
	seen func()
	tail []byte
	done bool
}

func (w *watch) Write(p []byte) (int, error) {
	if w.done {
		return len(p), nil
	}
	w.tail = append(w.tail, p...)
	if bytes.Contains(w.tail, w.want) {
		w.done = true
		w.seen()
	}
	if keep := len(w.want); len(w.tail) > keep {
		w.tail = append(w.tail[:0], w.tail[len(w.tail)-keep:]...)
	}
	return len(p), nil
}

// claimWait bounds how long a proxy waits for the demo to claim a call's key.
const claimWait = 30 * time.Second

// waitFor polls done until it reports true (and returns true), stop is
// closed or claimWait has passed.
func waitFor(stop <-chan struct{}, done func() bool) bool {
	deadline := time.Now().Add(claimWait)
	for !done() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-stop:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// claimLogged reports whether logs hold the engine's debug line for the
// claim of the client's key (logged in its stored form).
func claimLogged(logs, key string) bool {
	k, err := idem.ParseClientKey(key)
	if err != nil {
		return false
	}
	for line := range strings.Lines(logs) {
		if strings.Contains(line, `msg="claimed idempotency key"`) && strings.Contains(line, "key="+k.String()) {
			return true
		}
	}
	return false
}

// keyWatch calls seen once with the idempotency key of the first tools/call
// request that passed through it (the JSON the SDK sends, in _meta).
type keyWatch struct {
	seen func(key string)
	buf  []byte
	done bool
}

var keyField = regexp.MustCompile(`"tools/call".*"idempotencyKey":"([^"]+)"`)

func (w *keyWatch) Write(p []byte) (int, error) {
	if w.done {
		return len(p), nil
	}
	if w.buf = append(w.buf, p...); len(w.buf) > 64<<10 {
		w.buf = w.buf[len(w.buf)-32<<10:]
	}
	if m := keyField.FindSubmatch(w.buf); m != nil {
		w.done = true
		w.seen(string(m[1]))
	}
	return len(p), nil
}
