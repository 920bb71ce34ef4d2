package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/cmdmain"
	"github.com/idemkit/idem/memstore"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(config) bool
		wantErr func(error) bool
	}{
		{name: "defaults", want: func(c config) bool {
			return c.addr == "127.0.0.1:8080" && c.databaseURL == "" && c.lease == 30*time.Second &&
				c.retention == 24*time.Hour && c.wait == 5*time.Second
		}},
		{name: "environment", env: map[string]string{"DATABASE_URL": "postgres://x", "IDEMDEMO_LEASE": "5s", "IDEMDEMO_ADDR": ":9"},
			want: func(c config) bool {
				return c.databaseURL == "postgres://x" && c.lease == 5*time.Second && c.addr == ":9"
			}},
		{name: "flags win over the environment", args: []string{"-database-url", "postgres://flag", "-wait", "-1s"},
			env:  map[string]string{"DATABASE_URL": "postgres://env"},
			want: func(c config) bool { return c.databaseURL == "postgres://flag" && c.wait == -time.Second }},
		{name: "help", args: []string{"-help"}, wantErr: func(err error) bool { return errors.Is(err, cmdmain.ErrHelp) && cmdmain.ExitCode(err) == 0 }},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: func(err error) bool { return cmdmain.ExitCode(err) == 2 }},
		{name: "bad duration in the environment", env: map[string]string{"IDEMDEMO_RETENTION": "forever"},
			wantErr: func(err error) bool {
				return cmdmain.ExitCode(err) == 2 && strings.Contains(err.Error(), "IDEMDEMO_RETENTION")
			}},
		{name: "zero lease", args: []string{"-lease", "0s"}, wantErr: func(err error) bool { return cmdmain.ExitCode(err) == 2 }},
		{name: "lease under a millisecond", args: []string{"-lease", "2ns"}, wantErr: func(err error) bool { return cmdmain.ExitCode(err) == 2 }},
		{name: "scope secret and session cookies from the environment",
			env: map[string]string{"IDEMDEMO_SCOPE_SECRET": "s3cret", "IDEMDEMO_SESSION_COOKIES": "sid, remember_me"},
			want: func(c config) bool {
				return c.scopeSecret == "s3cret" && strings.Join(c.sessionCookies, ",") == "sid,remember_me"
			}},
		{name: "no session cookie", args: []string{"-session-cookies", ""},
			want: func(c config) bool { return c.sessionCookies != nil && len(c.sessionCookies) == 0 }},
		{name: "arguments", args: []string{"extra"}, wantErr: func(err error) bool { return cmdmain.ExitCode(err) == 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			c, err := parseConfig(tc.args, env(tc.env), &stderr)
			if tc.wantErr != nil {
				if err == nil || !tc.wantErr(err) {
					t.Fatalf("error %v (exit %d), not the one expected", err, cmdmain.ExitCode(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(c) {
				t.Fatalf("config %+v", c)
			}
		})
	}
}

func TestHelpListsEveryFlagWithItsEnvironmentVariable(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if _, err := parseConfig([]string{"-help"}, func(string) string { return "" }, &stderr); !errors.Is(err, cmdmain.ErrHelp) {
		t.Fatal(err)
	}
	for flag, env := range envVar {
		if !strings.Contains(stderr.String(), "-"+flag) || !strings.Contains(stderr.String(), "["+env+"]") {
			t.Errorf("help does not list -%s [%s]:\n%s", flag, env, stderr.String())
		}
	}
}

func TestDecodeInvoiceRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"customer":"acme","amount_cents":1}`, true},
		{`{"customer":"acme","amount_cents":1,"delay_ms":600000}`, true},
		{`{"customer":"acme","amount_cents":1,"delay_ms":600001}`, false},
		{`{"customer":"acme","amount_cents":1,"delay_ms":-1}`, false},
		{`{"customer":"  ","amount_cents":1}`, false},
		{`{"amount_cents":1}`, false},
		{`{"customer":"acme"}`, false},
		{`{"customer":"acme","amount_cents":1.5}`, false},
		{`{"customer":"acme","amount_cents":"1"}`, false},
		{`{"customer":"acme","amount_cents":1,"currency":"EUR"}`, false},
		{`{"customer":"acme","amount_cents":1} {}`, false},
		{`[]`, false},
		{``, false},
	} {
		_, err := decodeInvoiceRequest(strings.NewReader(tc.body))
		if (err == nil) != tc.ok {
			t.Errorf("%s: error %v, want ok=%v", tc.body, err, tc.ok)
		}
	}
}

func TestSelfURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://[::1]:8080"},
		{&net.TCPAddr{Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.ParseIP("10.0.0.7"), Port: 80}, "http://10.0.0.7:80"},
	} {
		if got := selfURL(tc.addr); got != tc.want {
			t.Errorf("selfURL(%v) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

// The app in-process on memstore: the handlers and the middleware wiring,
// without a process or a database.
func TestAppInProcess(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a := newApp(cfg, newMemoryBackend(cfg), slog.New(slog.DiscardHandler), "http://127.0.0.1:1")
	post := func(key, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/invoices", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		a.handler.ServeHTTP(w, r)
		return w
	}
	first := post("k", acme)
	if first.Code != http.StatusCreated || first.Body.String() != `{"id":1,"customer":"acme","amount_cents":1200}`+"\n" {
		t.Fatalf("create: %d %s", first.Code, first.Body)
	}
	retry := post("k", acme)
	if retry.Code != http.StatusCreated || retry.Body.String() != first.Body.String() || retry.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s %v", retry.Code, retry.Body, retry.Header())
	}
	if w := post("", acme); w.Code != http.StatusBadRequest {
		t.Fatalf("no key: %d", w.Code)
	}
	list := httptest.NewRecorder()
	a.handler.ServeHTTP(list, httptest.NewRequest("GET", "/invoices", nil))
	if list.Body.String() != `[{"id":1,"customer":"acme","amount_cents":1200}]`+"\n" {
		t.Fatalf("list: %s", list.Body)
	}

	// A request whose client hangs up during its delay runs on. One cut
	// off by shutdown (its bound ran out) answers 503 and releases its
	// key, and the app takes no new claims.
	ctx, cancel := context.WithCancel(t.Context())
	r := httptest.NewRequest("POST", "/invoices", strings.NewReader(`{"customer":"x","amount_cents":1,"delay_ms":600000}`)).WithContext(ctx)
	r.Header.Set("Idempotency-Key", "cancelled")
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.handler.ServeHTTP(w, r)
	}()
	// Cancel once the handler runs under its claim (the store holds "k"
	// and "cancelled").
	for a.be.store.(*memstore.Store).Len() < 2 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-done:
		t.Fatalf("the handler ended with its client: %d %s", w.Code, w.Body)
	case <-time.After(50 * time.Millisecond):
	}
	a.cancelCutOff()
	<-done
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("cut off: %d %s", w.Code, w.Body)
	}
	if n := a.be.store.(*memstore.Store).Len(); n != 1 {
		t.Fatalf("the store holds %d keys after the cut-off, want 1 (the cut-off key released)", n)
	}
	if again := post("cancelled", `{"customer":"x","amount_cents":1}`); again.Code != http.StatusServiceUnavailable {
		t.Fatalf("after shutdown: %d %s, want 503", again.Code, again.Body)
	}
}

// TestAppSessionCookieScopes: the demo scopes by its session cookie
// ("session" unless -session-cookies says otherwise): two users sending one
// key and body get two invoices, a user's retry gets a replay.
func TestAppSessionCookieScopes(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{"-scope-secret", "test-secret"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a := newApp(cfg, newMemoryBackend(cfg), slog.New(slog.DiscardHandler), "http://127.0.0.1:1")
	post := func(session string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/invoices", strings.NewReader(acme))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "same-key")
		r.AddCookie(&http.Cookie{Name: "session", Value: session})
		w := httptest.NewRecorder()
		a.handler.ServeHTTP(w, r)
		return w
	}
	alice, bob, again := post("alice"), post("bob"), post("alice")
	if alice.Code != http.StatusCreated || bob.Code != http.StatusCreated || alice.Body.String() == bob.Body.String() {
		t.Fatalf("alice %d %s, bob %d %s: want two invoices", alice.Code, alice.Body, bob.Code, bob.Body)
	}
	if again.Body.String() != alice.Body.String() || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("alice's retry: %s, want the replay of %s", again.Body, alice.Body)
	}
}

// FuzzDecodeInvoiceRequest: whatever the body, decoding never panics, and
// what it accepts is a valid invoice.
func FuzzDecodeInvoiceRequest(f *testing.F) {
	for _, s := range []string{
		acme,
		`{"customer":"acme","amount_cents":1,"delay_ms":600000}`,
		`{"customer":" ","amount_cents":1}`,
		`{"customer":"acme","amount_cents":-1}`,
		`{"customer":"acme","amount_cents":1e3}`,
		`{"customer":"\u0000","amount_cents":9223372036854775807}`,
		`null`, `[]`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req, err := decodeInvoiceRequest(strings.NewReader(body))
		if err != nil {
			return
		}
		if strings.TrimSpace(req.Customer) == "" || req.AmountCents <= 0 || req.DelayMS < 0 || req.DelayMS > maxDelay.Milliseconds() {
			t.Fatalf("accepted an invalid invoice %+v from %q", req, body)
		}
	})
}

// TestHelpGoesToStdout: -help asked for prints the usage on stdout, as
// "idem -h" does; a bad flag prints its error and the usage on stderr.
func TestHelpGoesToStdout(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"-help"}, func(string) string { return "" }, &stdout, &stderr); !errors.Is(err, cmdmain.ErrHelp) {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout.String(), "Usage: idemdemo [flags]\n") || stderr.Len() != 0 {
		t.Errorf("-help: stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	if err := run(t.Context(), []string{"-nope"}, func(string) string { return "" }, &stdout, &stderr); cmdmain.ExitCode(err) != 2 {
		t.Fatal(err)
	}
	if stdout.Len() != 0 || !strings.HasPrefix(stderr.String(), "flag provided but not defined: -nope\nUsage: idemdemo [flags]\n") {
		t.Errorf("-nope: stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}
