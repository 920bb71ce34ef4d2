package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	t.Run("MissingKey", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		for _, m := range []string{http.MethodPost, http.MethodPatch} {
			rec := serve(f.h, newReq(m, "/invoices", `{}`))
			wantProblem(t, rec, http.StatusBadRequest, middleware.TypeMissingKey)
		}
		wantCalls(t, f, 0)
	})

	t.Run("KeyOptional", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{KeyOptional: true}, nil)
		serve(f.h, newReq("POST", "/invoices", `{}`))
		rec := serve(f.h, newReq("POST", "/invoices", `{}`))
		wantStatus(t, rec, http.StatusCreated)
		wantCalls(t, f, 2)
	})

	t.Run("MalformedKey", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		long := strings.Repeat("k", 256)
		for name, opts := range map[string][]reqOpt{
			"empty string":       {hdr("Idempotency-Key", `""`)},
			"empty bare":         {hdr("Idempotency-Key", ``)},
			"too long":           {hdr("Idempotency-Key", `"`+long+`"`)},
			"too long bare":      {hdr("Idempotency-Key", long)},
			"list":               {hdr("Idempotency-Key", `"a", "b"`)},
			"bare list":          {hdr("Idempotency-Key", `a,b`)},
			"two lines":          {hdr("Idempotency-Key", `"a"`), hdr("Idempotency-Key", `"a"`)},
			"control char":       {hdr("Idempotency-Key", "\"a\x01b\"")},
			"tab inside":         {hdr("Idempotency-Key", "\"a\tb\"")},
			"non-ASCII":          {hdr("Idempotency-Key", `"schlüssel"`)},
			"bad escape":         {hdr("Idempotency-Key", `"a\nb"`)},
			"unterminated":       {hdr("Idempotency-Key", `"abc`)},
			"parameters":         {hdr("Idempotency-Key", `"abc";p=1`)},
			"space in bare":      {hdr("Idempotency-Key", `a b`)},
			"alias malformed":    {hdr("X-Idempotency-Key", `"a,`)},
			"primary and alias":  {hdr("Idempotency-Key", `"a"`), hdr("X-Idempotency-Key", `"b"`)},
			"alias empty string": {hdr("X-Idempotency-Key", `""`)},
		} {
			rec := serve(f.h, newReq("POST", "/invoices", `{}`, opts...))
			if rec.Code != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400", name, rec.Code)
				continue
			}
			wantProblem(t, rec, http.StatusBadRequest, middleware.TypeInvalidKey)
		}
		wantCalls(t, f, 0)
	})

	t.Run("KeyForms", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		// One key in every accepted spelling: one execution.
		first := serve(f.h, newReq("POST", "/invoices", `{}`, hdr("Idempotency-Key", `"k-1:a/b"`)))
		wantStatus(t, first, http.StatusCreated)
		for _, opts := range [][]reqOpt{
			{hdr("Idempotency-Key", `k-1:a/b`)},
			{hdr("Idempotency-Key", ` "k-1:a/b" `)},
			{hdr("X-Idempotency-Key", `k-1:a/b`)},
			{hdr("Idempotency-Key", `"k-1:a/b"`), hdr("X-Idempotency-Key", `k-1:a/b`)},
		} {
			wantReplay(t, first, serve(f.h, newReq("POST", "/invoices", `{}`, opts...)))
		}
		// Escapes, and a key of exactly 255 characters, are keys too.
		wantStatus(t, serve(f.h, newReq("POST", "/invoices", `{}`, hdr("Idempotency-Key", `"a\"b\\c"`))), http.StatusCreated)
		wantStatus(t, serve(f.h, newReq("POST", "/invoices", `{}`, key(strings.Repeat("k", 255)))), http.StatusCreated)
		wantCalls(t, f, 3)
	})

	t.Run("FirstRequestAndReplay", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		first := serve(f.h, newReq("POST", "/invoices", `{"amount":1}`, key("k1")))
		wantStatus(t, first, http.StatusCreated)
		if want := `{"run":1,"got":"{\"amount\":1}"}`; first.Body.String() != want {
			t.Fatalf("handler saw a different body: %s, want %s", first.Body, want)
		}
		if first.Header().Get("Set-Cookie") == "" {
			t.Fatal("the original response lost its Set-Cookie")
		}
		for range 3 {
			replay := serve(f.h, newReq("POST", "/invoices", `{"amount":1}`, key("k1")))
			wantReplay(t, first, replay)
			if c := replay.Header().Get("Set-Cookie"); c != "" {
				t.Fatalf("Set-Cookie replayed: %q", c)
			}
			if v := replay.Header().Get("X-Not-Recorded"); v != "" {
				t.Fatalf("a header outside the allow-list was replayed: %q", v)
			}
		}
		wantCalls(t, f, 1)
	})

	t.Run("RecordHeadersOption", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{RecordHeaders: []string{"x-not-recorded"}}, nil)
		serve(f.h, newReq("POST", "/invoices", `{}`, key("k")))
		replay := serve(f.h, newReq("POST", "/invoices", `{}`, key("k")))
		if replay.Header().Get("X-Not-Recorded") != "yes" || replay.Header().Get("Location") != "" {
			t.Fatalf("replayed headers %v, want exactly the configured ones", replay.Header())
		}
	})

	t.Run("EmptyResponse", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { f.calls.Add(1) }
		})
		first := serve(f.h, newReq("POST", "/ping", ``, key("k")))
		wantStatus(t, first, http.StatusOK)
		wantReplay(t, first, serve(f.h, newReq("POST", "/ping", ``, key("k"))))
		wantCalls(t, f, 1)
	})

	t.Run("TwoScopesOneKey", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		for _, opts := range [][]reqOpt{
			{hdr("Authorization", "Bearer alice")},
			{hdr("Authorization", "Bearer bob")},
			{hdr("X-Api-Key", "carol")},
			{hdr("Authorization", "Bearer alice"), hdr("X-Session-Id", "s2")},
		} {
			rec := serve(f.h, newReq("POST", "/invoices", `{}`, append(opts, key("shared"))...))
			wantStatus(t, rec, http.StatusCreated)
			if rec.Header().Get("Idempotent-Replayed") != "" {
				t.Fatal("a request in another scope got a replay")
			}
		}
		// Another route is another scope, too.
		wantStatus(t, serve(f.h, newReq("POST", "/payments", `{}`, hdr("Authorization", "Bearer alice"), key("shared"))), http.StatusCreated)
		wantCalls(t, f, 5)
		// Within a scope, the key still replays.
		rec := serve(f.h, newReq("POST", "/invoices", `{}`, hdr("Authorization", "Bearer bob"), key("shared")))
		if rec.Header().Get("Idempotent-Replayed") != "true" || !strings.Contains(rec.Body.String(), `"run":2`) {
			t.Fatalf("bob's retry got %s, want his own run 2, replayed", rec.Body)
		}
	})

	t.Run("ScopeFunc", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{Scope: func(r *http.Request) string { return r.Header.Get("X-Tenant") }}, nil)
		serve(f.h, newReq("POST", "/a", `{}`, hdr("X-Tenant", "t1"), key("k")))
		serve(f.h, newReq("POST", "/a", `{}`, hdr("X-Tenant", "t2"), key("k")))
		// Same tenant with another credential: one scope by this ScopeFunc.
		rec := serve(f.h, newReq("POST", "/a", `{}`, hdr("X-Tenant", "t1"), hdr("Authorization", "x"), key("k")))
		wantStatus(t, rec, http.StatusCreated)
		if rec.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatal("custom scope ignored")
		}
		wantCalls(t, f, 2)
	})

	t.Run("Mismatch", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		wantStatus(t, serve(f.h, newReq("POST", "/invoices?x=1", `{"amount":1}`, key("k"))), http.StatusCreated)
		for name, r := range map[string]*http.Request{
			"body":         newReq("POST", "/invoices?x=1", `{"amount":2}`, key("k")),
			"query":        newReq("POST", "/invoices?x=2", `{"amount":1}`, key("k")),
			"content type": newReq("POST", "/invoices?x=1", `{"amount":1}`, key("k"), hdr("Content-Type", "text/plain")),
		} {
			r.Header.Set("Content-Type", r.Header.Values("Content-Type")[len(r.Header.Values("Content-Type"))-1])
			rec := serve(f.h, r)
			if rec.Code != http.StatusUnprocessableEntity {
				t.Errorf("%s differs: status %d, want 422", name, rec.Code)
				continue
			}
			wantProblem(t, rec, http.StatusUnprocessableEntity, middleware.TypeMismatch)
		}
		wantCalls(t, f, 1)
	})

	t.Run("MismatchWhileInFlight", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		running := make(chan struct{})
		f := setup(t, newStore, middleware.Options{}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				f.calls.Add(1)
				close(running)
				<-release
			}
		})
		done := make(chan struct{})
		go func() { defer close(done); serve(f.h, newReq("POST", "/a", `1`, key("k"))) }()
		<-running
		rec := serve(f.h, newReq("POST", "/a", `2`, key("k")))
		close(release)
		<-done
		wantProblem(t, rec, http.StatusUnprocessableEntity, middleware.TypeMismatch)
		wantCalls(t, f, 1)
	})

	t.Run("FingerprintFunc", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{Fingerprint: func(r *http.Request, body []byte) string { return r.URL.Path }}, nil)
		first := serve(f.h, newReq("POST", "/a", `1`, key("k")))
		// A different body does not count for this fingerprint: replay.
		wantReplay(t, first, serve(f.h, newReq("POST", "/a", `2`, key("k"))))
	})

	t.Run("ReleasedStatuses", func(t *testing.T) {
		t.Parallel()
		kit := newStore(t) // one store; a key per status
		for _, status := range []int{500, 502, 503, 408, 429} {
			f := setupOn(kit, middleware.Options{}, func(f *fixture) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					f.calls.Add(1)
					w.WriteHeader(status)
				}
			})
			for range 2 {
				rec := serve(f.h, newReq("POST", "/a", `{}`, key(strconv.Itoa(status))))
				wantStatus(t, rec, status)
				if rec.Header().Get("Idempotent-Replayed") != "" {
					t.Fatalf("status %d replayed", status)
				}
			}
			wantCalls(t, f, 2)
		}
	})

	t.Run("RecordedClientErrors", func(t *testing.T) {
		t.Parallel()
		kit := newStore(t) // one store; a key per status
		for _, status := range []int{400, 404, 409, 422} {
			f := setupOn(kit, middleware.Options{}, func(f *fixture) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					f.calls.Add(1)
					http.Error(w, "nope", status)
				}
			})
			first := serve(f.h, newReq("POST", "/a", `{}`, key(strconv.Itoa(status))))
			wantReplay(t, first, serve(f.h, newReq("POST", "/a", `{}`, key(strconv.Itoa(status)))))
			wantCalls(t, f, 1)
		}
	})

	t.Run("RecordPolicy", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{RecordPolicy: func(status int) bool { return status != http.StatusCreated }}, nil)
		serve(f.h, newReq("POST", "/a", `{}`, key("k")))
		serve(f.h, newReq("POST", "/a", `{}`, key("k")))
		wantCalls(t, f, 2) // 201 released by this policy

		g := setup(t, newStore, middleware.Options{RecordPolicy: func(int) bool { return true }}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				f.calls.Add(1)
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		first := serve(g.h, newReq("POST", "/a", `{}`, key("k")))
		wantReplay(t, first, serve(g.h, newReq("POST", "/a", `{}`, key("k"))))
		wantCalls(t, g, 1) // 503 recorded by this policy
	})

	t.Run("Panic", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				if f.calls.Add(1) == 1 {
					w.WriteHeader(http.StatusCreated) // half an answer
					panic("boom")
				}
				createHandler(&fixture{})(w, r)
			}
		})
		if _, p := servePanic(f.h, newReq("POST", "/a", `{}`, key("k"))); p != "boom" {
			t.Fatalf("panic = %v, want the handler's panic re-raised", p)
		}
		rec := serve(f.h, newReq("POST", "/a", `{}`, key("k")))
		wantStatus(t, rec, http.StatusCreated)
		if rec.Header().Get("Idempotent-Replayed") != "" {
			t.Fatal("the retry of a panicked request got a replay")
		}
		wantCalls(t, f, 2)
		// The claim the panic released is not left behind: a retry now
		// replays the second run.
		wantReplay(t, rec, serve(f.h, newReq("POST", "/a", `{}`, key("k"))))
	})

	t.Run("AbortHandlerPanic", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				if f.calls.Add(1) == 1 {
					panic(http.ErrAbortHandler)
				}
			}
		})
		if _, p := servePanic(f.h, newReq("POST", "/a", `{}`, key("k"))); p != http.ErrAbortHandler {
			t.Fatalf("panic = %v, want http.ErrAbortHandler", p)
		}
		wantStatus(t, serve(f.h, newReq("POST", "/a", `{}`, key("k"))), http.StatusOK)
		wantCalls(t, f, 2)
	})

	t.Run("InFlight409", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		running := make(chan struct{})
		f := setup(t, newStore, middleware.Options{Wait: -1}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				if f.calls.Add(1) == 1 {
					close(running)
					<-release
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "done")
			}
		})
		var first *httptest.ResponseRecorder
		done := make(chan struct{})
		go func() { defer close(done); first = serve(f.h, newReq("POST", "/a", `{}`, key("k"))) }()
		<-running
		rec := serve(f.h, newReq("POST", "/a", `{}`, key("k")))
		wantProblem(t, rec, http.StatusConflict, middleware.TypeInFlight)
		wantRetryAfter(t, rec, int(idem.DefaultLease/time.Second))
		close(release)
		<-done
		wantReplay(t, first, serve(f.h, newReq("POST", "/a", `{}`, key("k"))))
		wantCalls(t, f, 1)
	})

	t.Run("InFlightWaitsForResult", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		running := make(chan struct{})
		f := setup(t, newStore, middleware.Options{Wait: time.Minute}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				f.calls.Add(1)
				close(running)
				<-release
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "done")
			}
		})
		var first *httptest.ResponseRecorder
		done := make(chan struct{})
		go func() { defer close(done); first = serve(f.h, newReq("POST", "/a", `{}`, key("k"))) }()
		<-running
		dup := make(chan *httptest.ResponseRecorder)
		go func() { dup <- serve(f.h, newReq("POST", "/a", `{}`, key("k"))) }()
		close(release)
		<-done
		wantReplay(t, first, <-dup)
		wantCalls(t, f, 1)
	})

	t.Run("Concurrent100", func(t *testing.T) {
		t.Parallel()
		const n = 100
		var arrived atomic.Int64
		allArrived := make(chan struct{})
		f := setup(t, newStore, middleware.Options{}, func(f *fixture) http.HandlerFunc {
			h := createHandler(f)
			return func(w http.ResponseWriter, r *http.Request) {
				// Hold the original until every request was sent, so
				// the others meet it in flight or completed.
				<-allArrived
				h(w, r)
			}
		})
		recs := make([]*httptest.ResponseRecorder, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if arrived.Add(1) == n {
					close(allArrived)
				}
				recs[i] = serve(f.h, newReq("POST", "/invoices", `{"amount":100}`, key("same")))
			})
		}
		wg.Wait()
		wantCalls(t, f, 1)
		var orig *httptest.ResponseRecorder
		for _, rec := range recs {
			if rec.Code == http.StatusCreated && rec.Header().Get("Idempotent-Replayed") == "" {
				if orig != nil {
					t.Fatal("two responses without the replay marker")
				}
				orig = rec
			}
		}
		if orig == nil {
			t.Fatal("no original response")
		}
		replays, conflicts := 0, 0
		for _, rec := range recs {
			switch {
			case rec == orig:
			case rec.Code == http.StatusConflict:
				wantProblem(t, rec, http.StatusConflict, middleware.TypeInFlight)
				conflicts++
			default:
				wantReplay(t, orig, rec)
				replays++
			}
		}
		t.Logf("1 original, %d replays, %d conflicts", replays, conflicts)
	})

	t.Run("StoreOutage", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{RetryAfter: 7 * time.Second}, nil)
		wantStatus(t, serve(f.h, newReq("POST", "/a", `{}`, key("before"))), http.StatusCreated)
		f.kit.breakStore()
		for _, k := range []string{"before", "after"} {
			rec := serve(f.h, newReq("POST", "/a", `{}`, key(k)))
			wantProblem(t, rec, http.StatusServiceUnavailable, middleware.TypeStoreUnavailable)
			if got := rec.Header().Get("Retry-After"); got != "7" {
				t.Fatalf("Retry-After = %q, want 7", got)
			}
		}
		wantCalls(t, f, 1)
	})

	t.Run("StoreOutageFailOpen", func(t *testing.T) {
		t.Parallel()
		var events eventLog
		f := setup(t, newStore, middleware.Options{FailOpen: true, Observer: events.observe}, nil)
		f.kit.breakStore()
		wantStatus(t, serve(f.h, newReq("POST", "/a", `{"x":1}`, key("k"))), http.StatusCreated)
		rec := serve(f.h, newReq("POST", "/a", `{"x":1}`, key("k")))
		wantStatus(t, rec, http.StatusCreated)
		if !strings.Contains(rec.Body.String(), `"got":"{\"x\":1}"`) {
			t.Fatalf("fail-open handler did not get the body: %s", rec.Body)
		}
		wantCalls(t, f, 2) // unsafe, as documented
		if events.count(idem.EventStoreError) != 2 {
			t.Fatalf("events %v, want two store errors", events.kinds())
		}
	})

	t.Run("ResponseOverRecordLimit", func(t *testing.T) {
		t.Parallel()
		big := strings.Repeat("x", 100)
		f := setup(t, newStore, middleware.Options{MaxRecordBytes: 64}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				f.calls.Add(1)
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, big[:50])
				io.WriteString(w, big[50:])
			}
		})
		first := serve(f.h, newReq("POST", "/a", `{}`, key("k")))
		wantStatus(t, first, http.StatusCreated)
		if first.Body.String() != big {
			t.Fatal("the over-limit response did not reach the client in full")
		}
		for range 2 {
			p := wantProblem(t, serve(f.h, newReq("POST", "/a", `{}`, key("k"))), http.StatusGone, middleware.TypeUnreplayable)
			if p["original_status"] != float64(http.StatusCreated) {
				t.Fatalf("original_status = %v, want 201", p["original_status"])
			}
		}
		wantCalls(t, f, 1)
		// Exactly at the limit is recorded.
		g := setup(t, newStore, middleware.Options{MaxRecordBytes: 100}, func(*fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) }
		})
		orig := serve(g.h, newReq("POST", "/a", `{}`, key("k")))
		wantReplay(t, orig, serve(g.h, newReq("POST", "/a", `{}`, key("k"))))
	})

	t.Run("RequestBodyOverLimit", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{MaxBodyBytes: 10}, nil)
		rec := serve(f.h, newReq("POST", "/a", `{"too":"long"}`, key("k")))
		wantProblem(t, rec, http.StatusRequestEntityTooLarge, middleware.TypeBodyTooLarge)
		// Without a Content-Length (chunked), the limit holds as well.
		r := newReq("POST", "/a", ``, key("k"))
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(`{"too":"long"}`)), -1
		wantProblem(t, serve(f.h, r), http.StatusRequestEntityTooLarge, middleware.TypeBodyTooLarge)
		wantCalls(t, f, 0)
		// At the limit, chunked: the handler sees the whole body.
		r = newReq("POST", "/a", ``, key("k"))
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(`0123456789`)), -1
		rec = serve(f.h, r)
		wantStatus(t, rec, http.StatusCreated)
		if !strings.Contains(rec.Body.String(), `"got":"0123456789"`) {
			t.Fatalf("handler saw %s", rec.Body)
		}
	})

	t.Run("PassThroughMethods", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		for _, m := range []string{"GET", "HEAD", "OPTIONS", "PUT", "DELETE"} {
			for range 2 {
				rec := serve(f.h, newReq(m, "/a", ``, key("k")))
				wantStatus(t, rec, http.StatusCreated)
				if rec.Header().Get("Idempotent-Replayed") != "" {
					t.Fatalf("%s replayed", m)
				}
			}
			// No key needed either.
			wantStatus(t, serve(f.h, newReq(m, "/a", ``)), http.StatusCreated)
		}
		wantCalls(t, f, 15)
	})

	t.Run("MethodsOption", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{Methods: []string{"PUT"}}, nil)
		serve(f.h, newReq("PUT", "/a", `{}`, key("k")))
		wantStatus(t, serve(f.h, newReq("PUT", "/a", `{}`, key("k"))), http.StatusCreated)
		serve(f.h, newReq("POST", "/a", `{}`))
		wantCalls(t, f, 2)
	})

	t.Run("Streaming", func(t *testing.T) {
		t.Parallel()
		testStreaming(t, newStore)
	})

	t.Run("RenewalKeepsClaim", func(t *testing.T) {
		t.Parallel()
		kit := newStore(t)
		counting := &renewSignal{Store: kit.store, renewed: make(chan struct{}, 100)}
		release := make(chan struct{})
		const lease = 600 * time.Millisecond
		h := middleware.New(counting, middleware.Options{Lease: lease, Scope: fixedScope})(http.HandlerFunc(
			func(w http.ResponseWriter, r *http.Request) { <-release; io.WriteString(w, "slow") }))
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- serve(h, newReq("POST", "/a", `{}`, key("k"))) }()
		for range 4 { // four renewals: longer than one lease
			<-counting.renewed
		}
		k, _ := idem.ParseKey("k")
		c, err := kit.store.Claim(context.Background(), idem.ClaimRequest{Scope: "tenant", Key: k})
		if err != nil || c.Status != idem.InFlight {
			t.Fatalf("claim while the handler runs past its first lease = %v, %v; want in flight", c.Status, err)
		}
		close(release)
		first := <-done
		wantReplay(t, first, serve(h, newReq("POST", "/a", `{}`, key("k"))))
	})

	t.Run("LostLeaseCancelsHandler", func(t *testing.T) {
		t.Parallel()
		testLostLease(t, newStore, false)
	})

	t.Run("LostLeaseFailsCommit", func(t *testing.T) {
		t.Parallel()
		testLostLease(t, newStore, true)
	})

	t.Run("ScopeByServeMuxPattern", func(t *testing.T) {
		t.Parallel()
		f := &fixture{kit: newStore(t)}
		mux := http.NewServeMux()
		mux.Handle("POST /invoices/{id}/pay", middleware.New(f.kit.store, middleware.Options{})(createHandler(f)))
		wantStatus(t, serve(mux, newReq("POST", "/invoices/1/pay", `{}`, key("k"))), http.StatusCreated)
		// One route, one scope: the key reused on another invoice is a
		// different request, not a second payment.
		wantProblem(t, serve(mux, newReq("POST", "/invoices/2/pay", `{}`, key("k"))), http.StatusUnprocessableEntity, middleware.TypeMismatch)
		wantCalls(t, f, 1)
	})

	t.Run("TokenFrom", func(t *testing.T) {
		t.Parallel()
		var tok idem.Token
		var ok bool
		f := setup(t, newStore, middleware.Options{Scope: fixedScope}, func(*fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { tok, ok = middleware.TokenFrom(r.Context()) }
		})
		serve(f.h, newReq("POST", "/a", `{}`, key("k")))
		k, _ := idem.ParseKey("k")
		if !ok || tok.Scope != "tenant" || tok.Key != k || tok.Generation <= 0 {
			t.Fatalf("TokenFrom = %v, %v", tok, ok)
		}
		serve(f.h, newReq("GET", "/a", ``))
		if ok {
			t.Fatal("TokenFrom reports a token for an unprotected request")
		}
	})

	t.Run("Commit", func(t *testing.T) {
		t.Parallel()
		testCommit(t, newStore)
	})

	t.Run("Observer", func(t *testing.T) {
		t.Parallel()
		var events eventLog
		release := make(chan struct{})
		running := make(chan struct{}, 1)
		f := setup(t, newStore, middleware.Options{Wait: -1, Observer: events.observe}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/slow" {
					running <- struct{}{}
					<-release
				}
				if r.URL.Path == "/fail" {
					w.WriteHeader(http.StatusInternalServerError)
				}
			}
		})
		serve(f.h, newReq("POST", "/a", `1`, key("k")))    // claimed, completed
		serve(f.h, newReq("POST", "/a", `1`, key("k")))    // replayed
		serve(f.h, newReq("POST", "/a", `2`, key("k")))    // mismatch
		serve(f.h, newReq("POST", "/fail", `1`, key("k"))) // claimed, released
		done := make(chan struct{})
		go func() { defer close(done); serve(f.h, newReq("POST", "/slow", `1`, key("k"))) }()
		<-running
		serve(f.h, newReq("POST", "/slow", `1`, key("k"))) // in flight
		close(release)
		<-done
		want := map[idem.EventKind]int{
			idem.EventClaimed: 3, idem.EventCompleted: 2, idem.EventReplayed: 1,
			idem.EventMismatch: 1, idem.EventReleased: 1, idem.EventInFlight: 1,
		}
		for kind, n := range want {
			if got := events.count(kind); got != n {
				t.Errorf("%v events: %d, want %d (all: %v)", kind, got, n, events.kinds())
			}
		}
	})

	t.Run("KeysNotLoggedInClear", func(t *testing.T) {
		t.Parallel()
		var buf syncBuffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		f := setup(t, newStore, middleware.Options{Logger: logger}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }
		})
		serve(f.h, newReq("POST", "/a", `1`, key("secret-key-42")))
		serve(f.h, newReq("POST", "/a", `1`, key("secret-key-42")))
		out := buf.String()
		if !strings.Contains(out, "key_hash=") {
			t.Fatalf("no key_hash in the log: %s", out)
		}
		if strings.Contains(out, "secret-key-42") {
			t.Fatalf("key logged in clear at info level: %s", out)
		}
	})
}

func fixedScope(*http.Request) string { return "tenant" }

// eventLog collects observer events.
type eventLog struct {
	mu     sync.Mutex
	events []idem.Event
}

func (l *eventLog) observe(_ *http.Request, e idem.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) count(k idem.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func (l *eventLog) kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.events {
		out = append(out, e.Kind.String())
	}
	return out
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// renewSignal reports each successful renewal.
type renewSignal struct {
	idem.Store
	renewed chan struct{}
}

func (s *renewSignal) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	end, err := s.Store.Renew(ctx, tok, lease)
	if err == nil {
		s.renewed <- struct{}{}
	}
	return end, err
}

// stallRenew holds every renewal until proceed is closed, so that the lease
// runs out under a handler that is still running.
type stallRenew struct {
	idem.Store
	stalled chan struct{} // receives when a renewal starts stalling
	proceed chan struct{}
}

func (s *stallRenew) Renew(ctx context.Context, tok idem.Token, lease time.Duration) (time.Time, error) {
	select {
	case s.stalled <- struct{}{}:
	default:
	}
	select {
	case <-s.proceed:
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	return s.Store.Renew(ctx, tok, lease)
}

// testLostLease makes a running handler lose its claim: its renewal stalls
// until the lease ran out and another caller took the key over. The handler
// then answers as usual, or through Commit (useCommit): its completion,
// fenced by the generation, records nothing over the new owner's claim.
func testLostLease(t *testing.T, newStore newKit, useCommit bool) {
	kit := newStore(t)
	stall := &stallRenew{Store: kit.store, stalled: make(chan struct{}, 1), proceed: make(chan struct{})}
	var events eventLog
	cause := make(chan error, 1)
	takenOver := make(chan struct{})
	const lease = 300 * time.Millisecond
	h := middleware.New(stall, middleware.Options{Lease: lease, Scope: fixedScope, Observer: events.observe})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			cause <- context.Cause(r.Context())
			<-takenOver
			if !useCommit {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "too late")
				return
			}
			err := middleware.Commit(w, r, http.StatusCreated, nil, []byte("too late"), func(context.Context, idem.Token, idem.Result) error {
				t.Error("Commit called record after the claim was lost")
				return nil
			})
			if !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("Commit after the claim was lost = %v, want ErrLeaseLost", err)
			}
		}))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve(h, newReq("POST", "/a", `{}`, key("k"))) }()
	<-stall.stalled

	// The lease runs out while the renewal stalls: the handler is
	// cancelled before it does, and another caller takes the key over
	// while the handler has not answered yet.
	k, _ := idem.ParseKey("k")
	ctx := context.Background()
	var taken idem.Claim
	for taken.Status != idem.Acquired {
		var err error
		taken, err = idem.ClaimWait(ctx, kit.store, idem.ClaimRequest{Scope: "tenant", Key: k, Lease: time.Minute}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
	}
	close(takenOver)
	close(stall.proceed)

	if err := <-cause; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("handler's context cause = %v, want ErrLeaseLost", err)
	}
	late := <-done
	if useCommit {
		wantProblem(t, late, http.StatusServiceUnavailable, middleware.TypeCommitFailed)
	}
	if events.count(idem.EventLeaseLost) != 1 {
		t.Fatalf("events %v, want one lease lost", events.kinds())
	}
	// The late answer was not recorded over the new owner's claim.
	if err := kit.store.Complete(ctx, taken.Token, idem.Result{Status: 202, Body: []byte("new owner")}); err != nil {
		t.Fatalf("the new owner could not complete: %v", err)
	}
	rec := serve(h, newReq("POST", "/a", `{}`, key("k")))
	if rec.Code != 202 || rec.Body.String() != "new owner" {
		t.Fatalf("retry got %d %q, want the new owner's result", rec.Code, rec.Body)
	}
}

func testStreaming(t *testing.T, newStore newKit) {
	kit := newStore(t)
	var calls atomic.Int64
	readFirst := make(chan struct{})
	handlerErr := make(chan error, 1)
	h := middleware.New(kit.store, middleware.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		flusher, ok := w.(http.Flusher)
		if !ok {
			handlerErr <- errors.New("the writer lost http.Flusher")
			return
		}
		flusher.Flush()
		// The client has the first event before the second is written:
		// the response streams through.
		select {
		case <-readFirst:
		case <-r.Context().Done():
			handlerErr <- errors.New("client gone before reading the first event")
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			handlerErr <- fmt.Errorf("ResponseController.SetWriteDeadline through the wrapper: %w", err)
			return
		}
		io.WriteString(w, "data: two\n\n")
		if err := rc.Flush(); err != nil {
			handlerErr <- fmt.Errorf("ResponseController.Flush: %w", err)
			return
		}
		handlerErr <- nil
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()

	post := func() *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/events", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", `"stream"`)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post()
	buf := make([]byte, len("data: one\n\n"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "data: one\n\n" {
		t.Fatalf("first event %q, %v", buf, err)
	}
	close(readFirst)
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := <-handlerErr; err != nil {
		t.Fatal(err)
	}
	if string(rest) != "data: two\n\n" {
		t.Fatalf("second event %q", rest)
	}

	replay := post()
	body, _ := io.ReadAll(replay.Body)
	replay.Body.Close()
	if string(body) != "data: one\n\ndata: two\n\n" || replay.Header.Get("Idempotent-Replayed") != "true" ||
		replay.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("replay %v %q", replay.Header, body)
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
}

// testCommit covers in-transaction completion; the record func plays the
// part of pgstore's CompleteTx plus tx.Commit with the store's Complete.
func testCommit(t *testing.T, newStore newKit) {
	kit := newStore(t)
	var calls atomic.Int64
	var failRecord atomic.Bool
	var recordedRes idem.Result
	commitErr := make(chan error, 1)
	var events eventLog
	h := middleware.New(kit.store, middleware.Options{Observer: events.observe})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		hdr := http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"s=1"}}
		body := []byte(fmt.Sprintf(`{"id":%d}`, n))
		err := middleware.Commit(w, r, http.StatusCreated, hdr, body, func(ctx context.Context, tok idem.Token, res idem.Result) error {
			if want, _ := middleware.TokenFrom(r.Context()); tok != want {
				return fmt.Errorf("record got token %v, TokenFrom %v", tok, want)
			}
			if failRecord.Load() {
				return errors.New("tx failed")
			}
			recordedRes = res
			return kit.store.Complete(ctx, tok, res)
		})
		commitErr <- err
	}))

	failRecord.Store(true)
	rec := serve(h, newReq("POST", "/a", `{}`, key("k")))
	if err := <-commitErr; err == nil {
		t.Fatal("Commit with a failing record returned nil")
	}
	wantProblem(t, rec, http.StatusServiceUnavailable, middleware.TypeCommitFailed)
	wantRetryAfter(t, rec, 1)
	if rec.Header().Get("Set-Cookie") != "" {
		t.Fatal("the failure answer carries the success's headers")
	}

	failRecord.Store(false) // the failed commit released the key: runs again
	first := serve(h, newReq("POST", "/a", `{}`, key("k")))
	if err := <-commitErr; err != nil {
		t.Fatal(err)
	}
	wantStatus(t, first, http.StatusCreated)
	if first.Body.String() != `{"id":2}` || first.Header().Get("Set-Cookie") != "s=1" {
		t.Fatalf("committed answer %v %s", first.Header(), first.Body)
	}
	want := idem.Result{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":2}`)}
	if !recordedRes.Equal(want) {
		t.Fatalf("Commit recorded %+v, want %+v (the middleware's capture)", recordedRes, want)
	}
	replay := serve(h, newReq("POST", "/a", `{}`, key("k")))
	wantReplay(t, first, replay)
	if calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", calls.Load())
	}
	// The middleware did not complete the key a second time after Commit.
	for kind, n := range map[idem.EventKind]int{idem.EventCompleted: 1, idem.EventReleased: 1, idem.EventStale: 0, idem.EventStoreError: 0} {
		if got := events.count(kind); got != n {
			t.Fatalf("%v events: %d, want %d (all: %v)", kind, got, n, events.kinds())
		}
	}

	// Unprotected: ErrNoClaim, nothing written.
	rec = serve(h, newReq("PUT", "/a", `{}`))
	if err := <-commitErr; !errors.Is(err, middleware.ErrNoClaim) {
		t.Fatalf("Commit without a claim = %v, want ErrNoClaim", err)
	}
	if rec.Body.Len() != 0 {
		t.Fatalf("Commit without a claim wrote %q", rec.Body)
	}
}
