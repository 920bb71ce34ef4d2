package middleware_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// trickle is a request body that sends a few bytes of what its
// Content-Length declares, then breaks off: a slow client, caught
// mid-body.
type trickle struct{ sent bool }

func (t *trickle) Read(p []byte) (int, error) {
	if t.sent {
		return 0, errors.New("the client stopped sending")
	}
	t.sent = true
	return copy(p, `{"amount":1`), nil
}

func (*trickle) Close() error { return nil }

// TestBodyBufferGrowsWithWhatArrives: a client that declares a 1 MiB body
// (the default MaxBodyBytes) and sends 11 bytes of it does not make the
// middleware allocate the declared megabyte before the body arrives; the
// buffer grows with what is read. Allocation is measured over many
// requests, so that the test's own allocations do not matter.
func TestBodyBufferGrowsWithWhatArrives(t *testing.T) {
	h := middleware.New(memstore.New(memstore.Options{}), middleware.Options{Scope: fixedScope})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("the handler ran on a broken body") }))
	const declared, requests = middleware.DefaultMaxBodyBytes, 50
	serveOne := func() {
		r := httptest.NewRequest(http.MethodPost, "/charge", nil)
		r.Header.Set("Idempotency-Key", `"k"`)
		r.Header.Set("Content-Length", strconv.Itoa(declared))
		r.ContentLength, r.Body = declared, &trickle{}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "could not be read") {
			t.Fatalf("a broken body: %d %s, want 400 (unreadable)", rec.Code, rec.Body)
		}
	}
	serveOne()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range requests {
		serveOne()
	}
	runtime.ReadMemStats(&after)
	perRequest := (after.TotalAlloc - before.TotalAlloc) / requests
	if perRequest > declared/4 {
		t.Fatalf("%d bytes allocated per request that sent 11 bytes of a declared %d, want far less than the declared length", perRequest, declared)
	}
	t.Logf("%d bytes allocated per request", perRequest)
}

// TestBodyReadWhole: bodies of every size up to MaxBodyBytes, with a
// Content-Length or chunked, reach the handler whole.
func TestBodyReadWhole(t *testing.T) {
	t.Parallel()
	var got []byte
	h := middleware.New(memstore.New(memstore.Options{}), middleware.Options{Scope: fixedScope})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, _ = io.ReadAll(r.Body)
			w.WriteHeader(http.StatusCreated)
		}))
	for i, size := range []int{1, 100, 32<<10 - 1, 32 << 10, 32<<10 + 1, 100_000, middleware.DefaultMaxBodyBytes} {
		body := strings.Repeat("x", size)
		for _, chunked := range []bool{false, true} {
			r := httptest.NewRequest(http.MethodPost, "/charge", strings.NewReader(body))
			r.Header.Set("Idempotency-Key", `"k`+strconv.Itoa(i)+strconv.FormatBool(chunked)+`"`)
			if chunked {
				r.ContentLength, r.Body = -1, io.NopCloser(strings.NewReader(body))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusCreated || string(got) != body {
				t.Fatalf("a body of %d bytes (chunked %v): %d, the handler read %d bytes", size, chunked, rec.Code, len(got))
			}
		}
	}
}
