package middleware_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/middleware"
)

// storeKit is what the suite needs from a store under test.
type storeKit struct {
	store idem.Store
	// breakStore makes every later call of store fail as a store outage
	// does: memstore through a failing wrapper, pgstore by closing its
	// pool.
	breakStore func()
}

// newKit returns a new, empty store for one test.
type newKit func(t *testing.T) storeKit

// fixture is one middleware over one store, with a handler that counts its
// runs.
type fixture struct {
	kit   storeKit
	calls atomic.Int64
	mw    func(http.Handler) http.Handler
	h     http.Handler
}

// setup mounts the middleware with opts over a fresh store, around handler
// (nil: createHandler).
func setup(t *testing.T, newStore newKit, opts middleware.Options, handler func(f *fixture) http.HandlerFunc) *fixture {
	t.Helper()
	return setupOn(newStore(t), opts, handler)
}

// setupOn is setup over an existing store.
func setupOn(kit storeKit, opts middleware.Options, handler func(f *fixture) http.HandlerFunc) *fixture {
	f := &fixture{kit: kit}
	if handler == nil {
		handler = createHandler
	}
	f.mw = middleware.New(f.kit.store, opts)
	f.h = f.mw(handler(f))
	return f
}

// createHandler answers 201 with a body that names its run, echoes the
// request body, and sets recorded and unrecorded headers.
func createHandler(f *fixture) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := f.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/invoices/"+strconv.FormatInt(n, 10))
		w.Header().Set("Set-Cookie", "session=secret"+strconv.FormatInt(n, 10))
		w.Header().Set("X-Not-Recorded", "yes")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d,"got":%q}`, n, body)
	}
}

type reqOpt func(*http.Request)

func hdr(name, value string) reqOpt {
	return func(r *http.Request) { r.Header.Add(name, value) }
}

func key(k string) reqOpt { return hdr("Idempotency-Key", `"`+k+`"`) }

func newReq(method, target, body string, opts ...reqOpt) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	for _, o := range opts {
		o(r)
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// servePanic serves r and returns what the handler panicked with.
func servePanic(h http.Handler, r *http.Request) (rec *httptest.ResponseRecorder, p any) {
	rec = httptest.NewRecorder()
	defer func() { p = recover() }()
	h.ServeHTTP(rec, r)
	return rec, nil
}

func wantStatus(t *testing.T, rec *httptest.ResponseRecorder, status int) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status = %d, want %d; body %s", rec.Code, status, rec.Body)
	}
}

func wantCalls(t *testing.T, f *fixture, n int64) {
	t.Helper()
	if got := f.calls.Load(); got != n {
		t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

// wantProblem checks an RFC 9457 problem response.
func wantProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, typ string) map[string]any {
	t.Helper()
	wantStatus(t, rec, status)
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	if p["type"] != typ {
		t.Fatalf("problem type = %v, want %s", p["type"], typ)
	}
	if p["status"] != float64(status) {
		t.Fatalf("problem status = %v, want %d", p["status"], status)
	}
	if s, _ := p["title"].(string); s == "" {
		t.Fatalf("problem without title: %s", rec.Body)
	}
	if s, _ := p["detail"].(string); s == "" {
		t.Fatalf("problem without detail: %s", rec.Body)
	}
	return p
}

func wantRetryAfter(t *testing.T, rec *httptest.ResponseRecorder, max int) {
	t.Helper()
	n, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	if err != nil || n < 1 || n > max {
		t.Fatalf("Retry-After = %q, want 1..%d seconds", rec.Header().Get("Retry-After"), max)
	}
}

// wantReplay checks that replay is orig, replayed.
func wantReplay(t *testing.T, orig, replay *httptest.ResponseRecorder) {
	t.Helper()
	if d := sameResponse(orig, replay); d != "" {
		t.Fatal(d)
	}
	if got := replay.Header().Get("Idempotent-Replayed"); got != "true" {
		t.Fatalf("Idempotent-Replayed = %q, want true", got)
	}
	if orig.Header().Get("Idempotent-Replayed") != "" {
		t.Fatal("the original response is marked as replayed")
	}
}

var recorded = []string{"Content-Type", "Location"}

// sameResponse reports how replay differs from orig in status, recorded
// headers and body bytes, or "" when it does not.
func sameResponse(orig, replay *httptest.ResponseRecorder) string {
	if orig.Code != replay.Code {
		return fmt.Sprintf("replay status %d, original %d", replay.Code, orig.Code)
	}
	for _, name := range recorded {
		if o, r := orig.Header().Values(name), replay.Header().Values(name); strings.Join(o, "\n") != strings.Join(r, "\n") {
			return fmt.Sprintf("replay %s = %q, original %q", name, r, o)
		}
	}
	if !bytes.Equal(orig.Body.Bytes(), replay.Body.Bytes()) {
		return fmt.Sprintf("replay body %q, original %q", replay.Body, orig.Body)
	}
	return ""
}

// runSuite runs every row of the behaviour table in the package doc
// (doc.go: no key, first request, retry, in flight, mismatch, ...) and the
// rest of the middleware's behaviour over the stores newStore makes.
func runSuite(t *testing.T, newStore newKit) {
	suiteKeys(t, newStore)
	suiteReplay(t, newStore)
	suiteScope(t, newStore)
	suitePanic(t, newStore)
	suiteConcurrency(t, newStore)
	suiteStore(t, newStore)
	suiteLimits(t, newStore)
	suiteLease(t, newStore)
	suiteObserve(t, newStore)
}

func fixedScope(*http.Request) string { return "tenant" }
