package faults_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/demoproc"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testhttp"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// TestNoReplayAcrossScopesHTTP sends one Idempotency-Key under different
// credentials, session cookies and sessions: each scope runs the handler
// once and replays only its own answer.
func TestNoReplayAcrossScopesHTTP(t *testing.T) {
	t.Parallel()
	dbURL, d := schemaDB(t, uniq("scopes"))
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: []string{"-log-level", "warn"}})
	key, customer := uniq("shared-key"), uniq("c")
	body := invoiceBody(customer, 500, 0)
	scopes := [][]string{
		nil,
		{"X-Api-Key", "tenant-a"},
		{"X-Api-Key", "tenant-b"},
		{"Authorization", "Bearer alice"},
		{"Authorization", "Bearer bob"},
		{"X-Session-Id", "session-1"},
		{"X-Session-Id", "session-2"},
		{"X-Api-Key", "tenant-a", "X-Session-Id", "session-1"},
		// Browser users: the demo names its session cookie "session".
		{"Cookie", "session=alice"},
		{"Cookie", "session=bob; theme=dark"},
	}
	ids := map[int64]bool{}
	first := make([]testhttp.Response, len(scopes))
	for i, h := range scopes {
		r := mustPost(t, p.URL(), "/invoices", body, append([]string{"Idempotency-Key", key}, h...)...)
		if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("scope %v: %d (replayed %q) %s, want a fresh 201", h, r.Status, r.Header.Get("Idempotent-Replayed"), r.Body)
		}
		ids[decodeInvoice(t, r).ID] = true
		first[i] = r
	}
	if len(ids) != len(scopes) {
		t.Fatalf("%d distinct invoices for %d scopes", len(ids), len(scopes))
	}
	for i, h := range scopes {
		r := mustPost(t, p.URL(), "/invoices", body, append([]string{"Idempotency-Key", key}, h...)...)
		if string(r.Body) != string(first[i].Body) || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("scope %v: retry answered %s, want the replay of its own %s", h, r.Body, first[i].Body)
		}
	}
	if n := len(d.invoicesOf(customer)); n != len(scopes) {
		t.Fatalf("%d invoices, want one per scope (%d)", n, len(scopes))
	}
}

// TestNoReplayAcrossScopesMCP: the same _meta.idempotencyKey in two
// conversations (_meta.sessionId), and the same JSON-RPC request id in two
// MCP sessions, are different calls: each runs once.
func TestNoReplayAcrossScopesMCP(t *testing.T) {
	t.Parallel()
	dbURL, d := schemaDB(t, uniq("mcp-scopes"))
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: []string{"-log-level", "warn"}})

	t.Run("same idempotencyKey, other sessionId", func(t *testing.T) {
		s := newMCPSession(t, p.URL())
		key, customer := uniq("agent-key"), uniq("c")
		var ids []int64
		for _, conv := range []string{"conversation-1", "conversation-2", "conversation-1"} {
			msgs := messages(s.postRaw(toolCall("1", customer, 1, 0, `{"sessionId":"`+conv+`","idempotencyKey":"`+key+`"}`), nil))
			ids = append(ids, toolInvoice(t, msgs).ID)
		}
		if ids[0] == ids[1] || ids[0] != ids[2] {
			t.Fatalf("invoices %v: want two conversations to get two invoices, and the first's retry its own", ids)
		}
		if n := len(d.invoicesOf(customer)); n != 2 {
			t.Fatalf("%d invoices, want 2", n)
		}
	})

	t.Run("same request id, other MCP session", func(t *testing.T) {
		a, b := newMCPSession(t, p.URL()), newMCPSession(t, p.URL())
		customer := uniq("c")
		ia := toolInvoice(t, messages(a.postRaw(toolCall("7", customer, 1, 0, ""), nil)))
		ib := toolInvoice(t, messages(b.postRaw(toolCall("7", customer, 1, 0, ""), nil)))
		again := toolInvoice(t, messages(a.postRaw(toolCall("7", customer, 1, 0, ""), nil)))
		if ia.ID == ib.ID || again.ID != ia.ID {
			t.Fatalf("invoices a=%d b=%d a-retry=%d: want two sessions to get two invoices, and a's retry its own", ia.ID, ib.ID, again.ID)
		}
		if n := len(d.invoicesOf(customer)); n != 2 {
			t.Fatalf("%d invoices, want 2", n)
		}
	})
}

// toolInvoice returns the invoice of a successful create_invoice result.
func toolInvoice(t *testing.T, msgs []rpcMessage) Invoice {
	t.Helper()
	if len(msgs) != 1 || msgs[0].Result == nil || msgs[0].Result.IsError {
		t.Fatalf("tools/call answered %+v, want a result", msgs)
	}
	var inv Invoice
	if err := json.Unmarshal(msgs[0].Result.StructuredContent, &struct {
		*Invoice
		Replayed *bool `json:"replayed"`
	}{Invoice: &inv}); err != nil {
		t.Fatalf("structured content %s: %v", msgs[0].Result.StructuredContent, err)
	}
	return inv
}

// TestCredentialsNeverReplayed: a handler that answers with Set-Cookie and
// Authorization (and a header outside the record list) has its answer
// recorded without them: a replay, which may reach another connection or
// client of the same scope, never carries them, and the table never holds
// them.
func TestCredentialsNeverReplayed(t *testing.T) {
	t.Parallel()
	pool, _ := testdb.Pool(t)
	ctx := t.Context()
	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(pool, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	const cookie, token = "session=s3cr3t-cookie", "Bearer s3cr3t-token"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", cookie)
		w.Header().Set("Authorization", token)
		w.Header().Set("Proxy-Authorization", token)
		w.Header().Set("X-Internal-Secret", "s3cr3t-header")
		w.Header().Set("Location", "/things/1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":1}` + "\n"))
	})
	srv := httptest.NewServer(middleware.New(store, middleware.Options{})(h))
	t.Cleanup(srv.Close)

	key := uniq("k")
	first := mustPost(t, srv.URL, "/things", `{}`, "Idempotency-Key", key, "Authorization", "Bearer client")
	if first.Header.Get("Set-Cookie") != cookie {
		t.Fatalf("the original answer lost its Set-Cookie: %v", first.Header)
	}
	replay := mustPost(t, srv.URL, "/things", `{}`, "Idempotency-Key", key, "Authorization", "Bearer client")
	if replay.Header.Get("Idempotent-Replayed") != "true" || string(replay.Body) != string(first.Body) || replay.Status != first.Status {
		t.Fatalf("not a replay: %d %v %s", replay.Status, replay.Header, replay.Body)
	}
	for _, name := range []string{"Set-Cookie", "Authorization", "Proxy-Authorization", "X-Internal-Secret"} {
		if v := replay.Header.Values(name); len(v) > 0 {
			t.Errorf("replay carries %s: %q", name, v)
		}
	}
	if replay.Header.Get("Location") != "/things/1" {
		t.Errorf("replay lost the recorded Location header: %v", replay.Header)
	}
	var stored string
	if err := pool.QueryRow(ctx, `SELECT result::text FROM idem_keys WHERE key = $1`, "key/"+key).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cr3t", "Bearer client"} {
		if strings.Contains(stored, secret) {
			t.Errorf("the stored result holds %q: %s", secret, stored)
		}
	}
	// The scope holds the credentials only as a hash.
	var inClear int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_keys WHERE position('Bearer' IN encode(scope, 'escape')) > 0`).Scan(&inClear); err != nil {
		t.Fatal(err)
	}
	if inClear != 0 {
		t.Errorf("%d scopes hold the Authorization header in clear", inClear)
	}
}

// TestKeysNotLogged runs the demo at its default level (info) through the
// paths that log (created, replayed, in flight, reused for another request,
// invalid, MCP calls) and checks that no key and no credential appears in
// its logs.
func TestKeysNotLogged(t *testing.T) {
	t.Parallel()
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			keysNotLogged(t, path.args, path.oneCommit)
		})
	}
}

func keysNotLogged(t *testing.T, pathArgs []string, oneCommit bool) {
	app := uniq("logs")
	dbURL, d := schemaDB(t, app)
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: append([]string{"-log-level", "info", "-wait", "100ms"}, pathArgs...)})
	secretKey := "SECRETKEY" + uniq("")
	secretAgentKey := "SECRETAGENTKEY" + uniq("")
	const apiKey = "SECRETAPIKEY-123"
	h := []string{"Idempotency-Key", secretKey, "X-Api-Key", apiKey, "X-Session-Id", "SECRETSESSION"}
	body := invoiceBody(uniq("c"), 1, 1500)

	slow := sendInBackgroundHeaders(p.URL(), body, h...)
	d.waitInFlight(app, secretKey, oneCommit)
	if r := mustPost(t, p.URL(), "/invoices", body, h...); r.Status != http.StatusConflict {
		t.Fatalf("duplicate in flight: %d %s, want 409", r.Status, r.Body)
	}
	if r, err := slow.result(); err != nil || r.Status != http.StatusCreated {
		t.Fatalf("slow request: %+v %v", r, err)
	}
	if r := mustPost(t, p.URL(), "/invoices", body, h...); r.Status != http.StatusCreated {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	if r := mustPost(t, p.URL(), "/invoices", invoiceBody("other", 2, 0), h...); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("key reused: %d %s", r.Status, r.Body)
	}
	if r := mustPost(t, p.URL(), "/invoices", body, "Idempotency-Key", secretKey+strings.Repeat("x", 300)); r.Status != http.StatusBadRequest {
		t.Fatalf("invalid key: %d %s", r.Status, r.Body)
	}
	s := newMCPSession(t, p.URL(), "X-Api-Key", apiKey)
	meta := `{"sessionId":"SECRETSESSION","idempotencyKey":"` + secretAgentKey + `"}`
	first := toolInvoice(t, messages(s.postRaw(toolCall("1", uniq("c"), 1, 0, meta), nil)))
	if again := toolInvoice(t, messages(s.postRaw(toolCall("2", first.Customer, 1, 0, meta), nil))); again != first {
		t.Fatalf("MCP replay: %+v, want %+v", again, first)
	}

	logs := p.Stderr().String()
	if !strings.Contains(logs, "idemdemo started") {
		t.Fatalf("no logs captured: %q", logs)
	}
	for _, secret := range []string{secretKey, secretAgentKey, apiKey, "SECRETSESSION"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs hold %q in clear:\n%s", secret, logs)
		}
	}
}

// TestMCPKeysNotLogged drives mcphttp into a path that logs the call's
// token: an operator forgets the keys while the call runs, so the claim is
// lost ("claim lost while the call ran"). The idempotency key must not be in
// the logs (mcphttp logs key digests).
func TestMCPKeysNotLogged(t *testing.T) {
	t.Parallel()
	dbURL, d := schemaDB(t, uniq("mcp-logs"))
	// Two-phase: the REST request's claim is in the table while it runs.
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: []string{"-log-level", "info", "-two-phase"}})
	s := newMCPSession(t, p.URL())
	secret := "SECRETAGENTKEY" + uniq("")
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.postRaw(toolCall("1", uniq("c"), 1, 3000, `{"idempotencyKey":"`+secret+`"}`), nil)
	}()
	// Both claims, the tool call's and the REST call's it makes, are live
	// while the REST handler sleeps: forget them.
	waitFor(t, "the call and its REST request to be claimed", time.Minute, func() bool {
		return d.count(`SELECT count(*) FROM idem_keys WHERE state = 'claimed'`) == 2
	})
	if _, err := d.pool.Exec(t.Context(), `DELETE FROM idem_keys`); err != nil {
		t.Fatal(err)
	}
	<-done
	waitFor(t, "mcphttp to log the lost claim", time.Minute, func() bool { return strings.Contains(p.Stderr().String(), "claim lost") })
	if strings.Contains(p.Stderr().String(), secret) {
		t.Errorf("the logs hold the key in clear:\n%s", p.Stderr().String())
	}
}

func sendInBackgroundHeaders(base, body string, header ...string) *background {
	b := &background{}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		b.resp, b.err = testhttp.Post(ctx, testhttp.NewClient(2*time.Minute), base+"/invoices", body, header...)
	}()
	return b
}

// leastPrivilegeGrants is the runtime role's whole set of rights on idem's
// objects, as docs/reliability.md and docs/operations.md document them: DML
// on the claim table, USAGE on the generation sequence, EXECUTE on the
// completion and stale-claim functions (revoked from PUBLIC, as a hardened
// database does);
// nothing on goose's version table.
func leastPrivilegeGrants(schema, role string) []string {
	return []string{
		fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, schema, role),
		fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE, DELETE ON %s.idem_keys TO %s`, schema, role),
		fmt.Sprintf(`GRANT USAGE ON SEQUENCE %s.idem_keys_generation_seq TO %s`, schema, role),
		fmt.Sprintf(`REVOKE ALL ON FUNCTION %s.idem_keys_complete(bytea, text, bigint, jsonb, bigint, timestamptz) FROM PUBLIC`, schema),
		fmt.Sprintf(`GRANT EXECUTE ON FUNCTION %s.idem_keys_complete(bytea, text, bigint, jsonb, bigint, timestamptz) TO %s`, schema, role),
		fmt.Sprintf(`REVOKE ALL ON FUNCTION %s.idem_keys_stale(bytea, text, bigint) FROM PUBLIC`, schema),
		fmt.Sprintf(`GRANT EXECUTE ON FUNCTION %s.idem_keys_stale(bytea, text, bigint) TO %s`, schema, role),
	}
}

// runtimeRole creates a login role with no rights (dropped when t ends)
// and returns its name and a URL connecting as it to schema.
func runtimeRole(t *testing.T, owner *pgxpool.Pool, schema, app string) (role, roleURL string) {
	t.Helper()
	ctx := t.Context()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role, password := "idem_rt_"+hex.EncodeToString(b[:]), hex.EncodeToString(b[:])+"-pw"
	if _, err := owner.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s' NOSUPERUSER NOCREATEDB NOCREATEROLE`, role, password)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, q := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			if _, err := owner.Exec(c, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	u, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return role, u.String()
}

// TestLeastPrivilegeDemo migrates with the demo as the owner, then runs the
// demo with -migrate=false as a runtime role holding only the documented
// grants (plus SELECT, INSERT on its own invoices table): invoices are
// created and replayed, a duplicate waits, a process killed mid-request
// leaves a claim that is renewed, taken over and swept as the runtime role,
// and nothing is refused.
func TestLeastPrivilegeDemo(t *testing.T) {
	t.Parallel()
	ownerURL, d := schemaDB(t, uniq("lp-owner"))
	owner := demoproc.Start(t, demoproc.Config{DatabaseURL: ownerURL, Args: []string{"-log-level", "warn"}})
	owner.Stop()
	schema := d.schema()
	app := uniq("lp-demo")
	role, roleURL := runtimeRole(t, d.pool, schema, app)
	for _, q := range append(leastPrivilegeGrants(schema, role), fmt.Sprintf(`GRANT SELECT, INSERT ON %s.idemdemo_invoices TO %s`, schema, role)) {
		if _, err := d.pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// The one-commit path (the default) as the runtime role: a claim in
	// the transaction, its bounds set, the invoice and the response
	// committed with it, then replayed.
	oneCommit := demoproc.Start(t, demoproc.Config{DatabaseURL: roleURL, Args: []string{"-migrate=false", "-log-level", "info"}})
	customer := uniq("c")
	key := uniq("k")
	body := invoiceBody(customer, 10, 0)
	first := mustPost(t, oneCommit.URL(), "/invoices", body, "Idempotency-Key", key)
	again := mustPost(t, oneCommit.URL(), "/invoices", body, "Idempotency-Key", key)
	if first.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
		t.Fatalf("as the runtime role, one commit: %d %s then %d %s", first.Status, first.Body, again.Status, again.Body)
	}
	oneCommit.Stop()

	// The two-phase path: renewals, takeovers and sweeps as the runtime
	// role.
	// A 4 s lease: renewals come every lease/3 and the work is cancelled
	// when none was confirmed by lease minus its margin (lease/5), a bound
	// a loaded machine overran with a 2 s lease. The slow request outlasts
	// several renewals.
	cfg := demoproc.Config{DatabaseURL: roleURL, Args: []string{"-migrate=false", "-two-phase", "-lease", "4s", "-sweep-interval", "1s", "-wait", "300ms", "-log-level", "info"}}
	p := demoproc.Start(t, cfg)
	key = uniq("k")
	first = mustPost(t, p.URL(), "/invoices", body, "Idempotency-Key", key)
	again = mustPost(t, p.URL(), "/invoices", body, "Idempotency-Key", key)
	if first.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
		t.Fatalf("as the runtime role, two-phase: %d %s then %d %s", first.Status, first.Body, again.Status, again.Body)
	}

	// A slow request (its lease renewed as the runtime role), killed; the
	// restarted process takes the key over and the sweeper runs.
	slowKey, slowCustomer := uniq("slow"), uniq("c")
	slowBody := invoiceBody(slowCustomer, 10, 6000)
	inFlight := sendInBackground(p.URL(), slowKey, slowBody)
	waitFor(t, "the slow request to be claimed", time.Minute, func() bool {
		rs := d.keyRows(slowKey)
		return len(rs) == 1 && rs[0].state == "claimed"
	})
	if r := mustPost(t, p.URL(), "/invoices", slowBody, "Idempotency-Key", slowKey); r.Status != http.StatusConflict {
		t.Fatalf("duplicate in flight: %d %s, want 409", r.Status, r.Body)
	}
	p.Kill()
	inFlight.wait(t)
	logs := p.Stderr().String()
	p = p.Restart()
	r := retryUntilAnswered(t, p.URL(), slowKey, slowBody, time.Minute)
	if r.Status != http.StatusCreated {
		t.Fatalf("after the crash: %d %s", r.Status, r.Body)
	}
	assertOneInvoice(t, d, slowCustomer, decodeInvoice(t, r))
	if n := d.count(`SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, role); n == 0 {
		t.Fatal("the demo is not connected as the runtime role")
	}
	logs += p.Stderr().String()
	if strings.Contains(logs, "permission denied") || strings.Contains(logs, "42501") {
		t.Fatalf("the runtime role was refused something:\n%s", logs)
	}
}

// TestLeastPrivilege migrates as the owner, then runs pgstore and the
// middleware (with an in-transaction Commit) as a runtime role that holds
// only DML on idem's table, USAGE on its sequence and EXECUTE on its
// completion function: every operation works, and DDL is refused.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	ownerPool, schema := testdb.Pool(t)
	ctx := t.Context()
	if err := migrations.Up(ctx, ownerPool, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	// The application's own table, with the application's own grants.
	if _, err := ownerPool.Exec(ctx, `CREATE TABLE invoices (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, amount bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	role, roleURL := runtimeRole(t, ownerPool, schema, "faults-least-privilege")
	for _, q := range append(leastPrivilegeGrants(schema, role), fmt.Sprintf(`GRANT SELECT, INSERT ON %s.invoices TO %s`, schema, role)) {
		if _, err := ownerPool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	cfg, err := pgxpool.ParseConfig(roleURL)
	if err != nil {
		t.Fatal(err)
	}
	pool := testdb.NewPool(t, cfg)
	var who string
	if err := pool.QueryRow(ctx, `SELECT current_user`).Scan(&who); err != nil || who != role {
		t.Fatalf("connected as %q (%v), want %q", who, err, role)
	}

	// The runtime role cannot migrate (it must start with migrations
	// skipped).
	if err := migrations.Up(ctx, pool, migrations.Options{}); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("migrations.Up as the runtime role: %v, want permission denied", err)
	}
	// A lease far longer than the test: what it tests is privileges, and
	// a renewal late on a loaded machine (with a 1 s lease, one not
	// confirmed within 0.8 s) would cut the handler off and fail its
	// Commit. The store operations below take their own short lease.
	const lease = time.Minute
	store, err := pgstore.New(pool, pgstore.Options{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)

	// The middleware with an in-transaction completion.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := pool.Begin(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback(context.WithoutCancel(r.Context()))
		var id int64
		if err := tx.QueryRow(r.Context(), `INSERT INTO invoices (amount) VALUES (1) RETURNING id`).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		err = middleware.Commit(w, r, http.StatusCreated, http.Header{"Content-Type": {"application/json"}}, []byte(fmt.Sprintf(`{"id":%d}`, id)),
			func(ctx context.Context, tok idem.Token, res idem.Result) error {
				if err := store.CompleteTx(ctx, tx, tok, res); err != nil {
					return err
				}
				return tx.Commit(ctx)
			})
		if err != nil {
			t.Errorf("Commit as the runtime role: %v", err)
		}
	})
	srv := httptest.NewServer(middleware.New(store, middleware.Options{Engine: engine.Options{Lease: lease, Wait: 5 * time.Second}})(h))
	t.Cleanup(srv.Close)
	key := uniq("k")
	first := mustPost(t, srv.URL, "/invoices", `{}`, "Idempotency-Key", key)
	again := mustPost(t, srv.URL, "/invoices", `{}`, "Idempotency-Key", key)
	if first.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
		t.Fatalf("as the runtime role: first %d %s, retry %d %s", first.Status, first.Body, again.Status, again.Body)
	}

	// Every store operation: claim, renew, release, complete, wait, sweep.
	k2, _ := idem.ParseClientKey(uniq("k2"))
	req := idem.ClaimRequest{Scope: "s", Key: k2, Lease: 50 * time.Millisecond}
	c, err := store.Claim(ctx, req)
	if err != nil || c.Status != idem.Acquired {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if _, err := store.Renew(ctx, c.Token, 50*time.Millisecond); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := store.Release(ctx, c.Token); err != nil {
		t.Fatalf("release: %v", err)
	}
	if c, err = store.Claim(ctx, req); err != nil || c.Status != idem.Acquired {
		t.Fatalf("claim again: %+v %v", c, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = store.Wait(waitCtx, req.Scope, req.Key) // returns when the short lease ran out (or spuriously)
	cancel()
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	waitFor(t, "the sweeper to remove the abandoned claim", time.Minute, func() bool {
		st, err := store.Sweep(ctx, 0)
		if err != nil {
			t.Fatalf("sweep: %v", err)
		}
		return st.Abandoned > 0
	})
	if c, err = store.Claim(ctx, req); err != nil || c.Status != idem.Acquired {
		t.Fatalf("claim after sweep: %+v %v", c, err)
	}
	if err := store.Complete(ctx, c.Token, idem.Result{Status: 200, Body: []byte("ok")}); err != nil {
		t.Fatalf("complete: %v", err)
	}

	// And nothing more: no DDL, no other table.
	for _, q := range []string{
		`DROP TABLE idem_keys`,
		`ALTER TABLE idem_keys ADD COLUMN x int`,
		`TRUNCATE idem_keys`,
		`CREATE TABLE stolen (x int)`,
		`UPDATE idem_keys_goose_version SET version_id = 0`,
		`DELETE FROM invoices`,
	} {
		_, err := pool.Exec(ctx, q)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s as the runtime role: %v, want permission denied (42501)", q, err)
		}
	}
}

// TestMCPUpstreamScopedByPrincipal: the create_invoice tool forwards the
// caller's credentials with the keys (mcphttp.Transport, to the origins in
// its Upstreams), so the REST middleware
// scopes the forwarded key to the caller: two principals sending one
// _meta.idempotencyKey (and no sessionId) get two invoices, not a replay of
// the other's.
func TestMCPUpstreamScopedByPrincipal(t *testing.T) {
	t.Parallel()
	dbURL, d := schemaDB(t, uniq("gap-principals"))
	p := demoproc.Start(t, demoproc.Config{DatabaseURL: dbURL, Args: []string{"-log-level", "warn"}})
	a := newMCPSession(t, p.URL(), "X-Api-Key", "tenant-a")
	b := newMCPSession(t, p.URL(), "X-Api-Key", "tenant-b")
	key, customer := uniq("agent-key"), uniq("c")
	meta := `{"idempotencyKey":"` + key + `"}`
	ia := toolInvoice(t, messages(a.postRaw(toolCall("1", customer, 1, 0, meta), nil)))
	ib := toolInvoice(t, messages(b.postRaw(toolCall("1", customer, 1, 0, meta), nil)))
	if ia.ID == ib.ID {
		t.Errorf("two principals with one idempotencyKey got the same invoice %d", ia.ID)
	}
	if n := len(d.invoicesOf(customer)); n != 2 {
		t.Errorf("%d invoices, want 2", n)
	}
}
