package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idem/internal/cmdmain"
	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/middleware"
)

func TestKeys(t *testing.T) {
	t.Parallel()
	dbURL, _ := fixture(t)
	checkOutput(t, "keys", mustRun(t, dbURL, "keys"), `SCOPE     KEY            DIGEST            ENDPOINT             CALLER  STATE      AGE  OWNER
tenant-1  key/done       f21d24f8f755e5cf  POST /payments/{id}  acct-7  completed  <d>  test
tenant-1  key/abandoned  44cfbd316d5b56a8  tools/call refund    -       abandoned  <d>  test
tenant-1  key/live       27fd5e52759dc76c  -                    -       live       <d>  test
`)
	checkOutput(t, "keys --state live", mustRun(t, dbURL, "keys", "--state", "live"), `SCOPE     KEY       DIGEST            ENDPOINT  CALLER  STATE  AGE  OWNER
tenant-1  key/live  27fd5e52759dc76c  -         -       live   <d>  test
`)
	checkOutput(t, "keys --prefix ab", mustRun(t, dbURL, "keys", "--prefix", "ab", "--scope", "tenant-1"), `SCOPE     KEY            DIGEST            ENDPOINT           CALLER  STATE      AGE  OWNER
tenant-1  key/abandoned  44cfbd316d5b56a8  tools/call refund  -       abandoned  <d>  test
`)
	checkOutput(t, "keys --stored-prefix key/d", mustRun(t, dbURL, "keys", "--stored-prefix", "key/d"), `SCOPE     KEY       DIGEST            ENDPOINT             CALLER  STATE      AGE  OWNER
tenant-1  key/done  f21d24f8f755e5cf  POST /payments/{id}  acct-7  completed  <d>  test
`)
	checkOutput(t, "keys --digest", mustRun(t, dbURL, "keys", "--digest", "44cfbd316d5b56a8"), `SCOPE     KEY            DIGEST            ENDPOINT           CALLER  STATE      AGE  OWNER
tenant-1  key/abandoned  44cfbd316d5b56a8  tools/call refund  -       abandoned  <d>  test
`)
	checkOutput(t, "keys --scope tenant-2", mustRun(t, dbURL, "keys", "--scope", "tenant-2"), "no keys in table idem_keys match\n")

	r := idemCLI(t.Context(), dbURL, "keys", "--limit", "1")
	if r.err != nil || r.stderr != "idem: keys: showed the 1 most recent; --limit N shows more\n" {
		t.Errorf("keys --limit 1: %v, stderr %q", r.err, r.stderr)
	}
	checkOutput(t, "keys --limit 1", r.stdout, "SCOPE     KEY       DIGEST            ENDPOINT             CALLER  STATE      AGE  OWNER\n"+
		"tenant-1  key/done  f21d24f8f755e5cf  POST /payments/{id}  acct-7  completed  <d>  test\n")

	var listed []map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, dbURL, "keys", "--json", "--state", "completed")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0]["scope"] != "tenant-1" || listed[0]["key"] != "key/done" || listed[0]["state"] != "completed" ||
		listed[0]["owner"] != "test" || listed[0]["fingerprint"] != "fp" || listed[0]["completed_at"] == nil || listed[0]["expires_at"] == nil ||
		listed[0]["key_digest"] != "f21d24f8f755e5cf" || listed[0]["method"] != "POST" || listed[0]["route"] != "POST /payments/{id}" || listed[0]["caller"] != "acct-7" {
		t.Errorf("keys --json: %v", listed)
	}
	if out := mustRun(t, dbURL, "keys", "--json", "--scope", "nobody"); out != "[]\n" {
		t.Errorf("keys --json with nothing listed: %q", out)
	}
}

// TestInspectStoredKeyAsKey: a stored key typed into --key (copied from
// "idem keys") is absent, and the message says what to type instead.
func TestInspectStoredKeyAsKey(t *testing.T) {
	t.Parallel()
	dbURL, _ := fixture(t)
	r := idemCLI(t.Context(), dbURL, "inspect", "--scope", "tenant-1", "--key", "key/done")
	const want = `idem: no such key: scope "tenant-1", key "key/key%2Fdone" is absent (never claimed, released, swept or forgotten); if "key/done" is the key as stored (as "idem keys" prints it), pass --stored-key key/done`
	if got := cmdmain.Message("idem", r.err); r.code() != 1 || got != want {
		t.Errorf("exit %d\n got %s\nwant %s", r.code(), got, want)
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"3687fff43b":  "3687fff43b",
		"mcp:ab12":    "mcp:ab12",
		"tenant-1":    "tenant-1",
		"":            "''",
		"acme corp":   "'acme corp'",
		"it's":        `'it'\''s'`,
		"café":        "'café'",
		"a\x00b\xff'": `$'a\x00b\xff\''`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestScopeFindsTheKey: the scope "idem scope" computes from a request's
// credentials, session and route is the one the middleware and mcphttp
// stored the request's key under, so "idem inspect" finds it.
func TestScopeFindsTheKey(t *testing.T) {
	t.Parallel()
	dbURL, store := migratedStore(t)
	const secret = "a 32-byte secret from the vault!"
	getenv := func(k string) string {
		switch k {
		case "DATABASE_URL":
			return dbURL
		case "SHOP_SCOPE_SECRET":
			return secret
		}
		return ""
	}
	idemScope := func(t *testing.T, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), append([]string{"scope", "--secret-env", "SHOP_SCOPE_SECRET"}, args...), getenv, &stdout, &stderr); err != nil || stderr.Len() > 0 {
			t.Fatalf("idem scope %q: %v, stderr %q", args, err, stderr.String())
		}
		return strings.TrimSuffix(stdout.String(), "\n")
	}

	mux := http.NewServeMux()
	mux.Handle("POST /orders", middleware.New(store, middleware.Options{
		SessionCookies: []string{"session"},
		ScopeSecret:    []byte(secret),
		Principal:      func(r *http.Request) string { return r.Header.Get("X-Test-User") },
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	for _, tc := range []struct {
		name    string
		headers map[string]string
		args    []string
	}{
		{"bearer token and session", map[string]string{"Authorization": "Bearer t0k3n", "X-Session-Id": "s1"},
			[]string{"-H", "Authorization: Bearer t0k3n", "--session", "s1", "--session-cookies", "session"}},
		{"session cookie", map[string]string{"Cookie": "session=c00k1e; theme=dark"},
			[]string{"-H", "Cookie: session=c00k1e; theme=dark", "--session-cookies", "session"}},
		{"principal", map[string]string{"X-Test-User": "alice", "Authorization": "Bearer refreshed"},
			[]string{"--principal", "alice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
			r.Header.Set("Idempotency-Key", "order-"+strings.ReplaceAll(tc.name, " ", "-"))
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				t.Fatalf("POST: %d %s", w.Code, w.Body)
			}
			scope := idemScope(t, append(tc.args, "--route", "POST /orders")...)
			out := mustRun(t, dbURL, "inspect", "--scope", scope, "--key", "order-"+strings.ReplaceAll(tc.name, " ", "-"))
			if !strings.Contains(out, "status 201") {
				t.Errorf("inspect:\n%s", out)
			}
			if out := mustRun(t, dbURL, "keys", "--scope", scope); !strings.Contains(out, scope+"  key/order-") {
				t.Errorf("keys --scope:\n%s", out)
			}
		})
	}

	t.Run("mcp", func(t *testing.T) {
		server := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "1"}, nil)
		mcp.AddTool(server, &mcp.Tool{Name: "order"}, func(ctx context.Context, req *mcp.CallToolRequest, in map[string]any) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ordered"}}}, nil, nil
		})
		inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
		wrapped := mcphttp.New(store, mcphttp.Options{ScopeSecret: []byte(secret), SessionCookies: []string{}})(inner)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Header.Set("X-Api-Key", "k-123")
			wrapped.ServeHTTP(w, r)
		}))
		defer srv.Close()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(t.Context(),
			&mcp.StreamableClientTransport{Endpoint: srv.URL, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "order", Arguments: map[string]any{},
			Meta: mcp.Meta{"sessionId": "conv-7", "idempotencyKey": "turn-1"}}); err != nil {
			t.Fatal(err)
		}
		scope := idemScope(t, "--mcp", "-H", "X-Api-Key: k-123", "--session", "conv-7", "--session-cookies", "")
		if !strings.HasPrefix(scope, "mcp:") {
			t.Fatalf("scope %q", scope)
		}
		if out := mustRun(t, dbURL, "inspect", "--scope", scope, "--key", "turn-1"); !strings.Contains(out, "state        completed") {
			t.Errorf("inspect:\n%s", out)
		}
	})
}

// TestScopeOutput: the scope alone on stdout, and a note on stderr when no
// secret is set; cookies without --session-cookies are refused as the
// middleware refuses them.
func TestScopeOutput(t *testing.T) {
	t.Parallel()
	r := idemCLI(t.Context(), "", "scope", "-H", "Authorization: Bearer t0k3n", "--route", "POST /invoices")
	if r.err != nil || len(r.stdout) != 65 || r.stderr != "idem: scope: $IDEM_SCOPE_SECRET is not set: computed without a ScopeSecret (plain SHA-256), as for a service that sets none\n" {
		t.Errorf("scope: %v, stdout %q, stderr %q", r.err, r.stdout, r.stderr)
	}
	r = idemCLI(t.Context(), "", "scope", "-H", "Cookie: session=x", "--route", "POST /invoices")
	const want = "idem: the request carries cookies but no credential, and --session-cookies is not given: name the service's session cookies (--session-cookies session), or --session-cookies '' if none identifies a caller"
	if got := cmdmain.Message("idem", r.err); r.code() != 1 || got != want {
		t.Errorf("cookie only: exit %d\n got %s\nwant %s", r.code(), got, want)
	}
}
