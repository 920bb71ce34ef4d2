package middleware_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// discardWriter is a ResponseWriter with as little cost as possible, so
// that the benchmarks measure the middleware.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

var benchBody = `{"customer":"ACME","amount_cents":12345}`

func benchHandler() http.Handler {
	resp := []byte(`{"id":1,"customer":"ACME","amount_cents":12345}`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(resp)
	})
}

func benchRequest(key string) *http.Request {
	r, _ := http.NewRequest("POST", "http://example.com/invoices", strings.NewReader(benchBody))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer token")
	r.Header.Set("Idempotency-Key", key)
	return r
}

// BenchmarkBaseline is the handler without the middleware, for comparison.
func BenchmarkBaseline(b *testing.B) {
	h := benchHandler()
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, benchRequest(`"k"`))
	}
}

// BenchmarkReplay is a retry of a completed key: the replay path.
func BenchmarkReplay(b *testing.B) {
	h := middleware.New(memstore.New(memstore.Options{}), middleware.Options{})(benchHandler())
	w := &discardWriter{h: http.Header{}}
	h.ServeHTTP(w, benchRequest(`"k"`))
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, benchRequest(`"k"`))
	}
}

// BenchmarkUnique is a new key each time: claim, run, capture, complete.
// The store keeps the latest 1024 results, so that the benchmark measures
// the middleware rather than the garbage collector scanning a large store.
func BenchmarkUnique(b *testing.B) {
	h := middleware.New(memstore.New(memstore.Options{Capacity: 1024}), middleware.Options{})(benchHandler())
	w := &discardWriter{h: http.Header{}}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, benchRequest(strconv.Itoa(i)))
		i++
	}
}
