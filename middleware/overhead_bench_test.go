package middleware_test

import (
	"net/http"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// These benchmarks measure what the middleware adds to a request, side by
// side with the bare handler, and how many copies of a large response it
// makes. Run them with
//
//	go test -run '^$' -bench 'Overhead|LargeResponse' -benchmem -count 3 ./middleware/
//
// docs/performance.md ("The middleware alone", "Memory") records the numbers.

// sinkWriter is a ResponseWriter that costs next to nothing, so the numbers
// are the middleware's and the handler's.
type sinkWriter struct {
	h      http.Header
	n      int
	status int
}

func (w *sinkWriter) Header() http.Header         { return w.h }
func (w *sinkWriter) WriteHeader(code int)        { w.status = code }
func (w *sinkWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

const overheadBody = `{"customer":"ACME","amount_cents":12345}`

// overheadHandler answers like the load tool's handler: 201 and a small JSON
// body with its length declared.
func overheadHandler() http.Handler {
	resp := []byte(`{"id":"inv_0000000000","customer":"ACME","amount_cents":12345}`)
	length := strconv.Itoa(len(resp))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{length}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(resp)
	})
}

// overheadRequest is a fresh request, as the server would hand one over. It
// is built inside the timed loop for the bare handler too, so the
// difference between sub-benchmarks is the middleware's.
func overheadRequest(key string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://example.com/invoices", strings.NewReader(overheadBody))
	r.Header["Content-Type"] = []string{"application/json"}
	r.Header["Idempotency-Key"] = []string{key}
	return r
}

// BenchmarkOverhead: "bare" is the handler alone; "unique" is a new key per
// request through the middleware over memstore (claim, run, capture,
// complete); "replay" is a completed key requested again. Subtract bare's
// ns/op and allocs/op to get the middleware's cost.
func BenchmarkOverhead(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = `"k` + strconv.Itoa(i) + "-"
	}
	b.Run("bare", func(b *testing.B) {
		h := overheadHandler()
		w := &sinkWriter{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, overheadRequest(`"k"`))
		}
	})
	b.Run("unique", func(b *testing.B) {
		// Results expire at once, so the store, bounded, reclaims them
		// when it fills instead of refusing new keys, and the garbage
		// collector does not end up scanning millions of them.
		h := middleware.New(memstore.New(memstore.Options{Capacity: 1 << 12, Retention: time.Nanosecond}), middleware.Options{})(overheadHandler())
		w := &sinkWriter{h: http.Header{}}
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			// Keys recur only after 64k requests, long after the
			// store dropped them.
			h.ServeHTTP(w, overheadRequest(keys[i%len(keys)]+strconv.Itoa(i/len(keys))+`"`))
			i++
			if w.status != http.StatusCreated {
				b.Fatalf("status %d, want 201: the benchmark must time claims, not rejections", w.status)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		h := middleware.New(memstore.New(memstore.Options{}), middleware.Options{})(overheadHandler())
		w := &sinkWriter{h: http.Header{}}
		h.ServeHTTP(w, overheadRequest(`"k"`))
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, overheadRequest(`"k"`))
			if w.h.Get(middleware.ReplayedHeader) != "true" {
				b.Fatal("not a replay")
			}
		}
	})
}

// BenchmarkLargeResponse sends a 10 MiB response through the middleware
// (recorded: MaxRecordBytes is raised above it), "first" with a new key each
// time and "replay" with a completed one, over memstore and over pgstore
// (which needs TEST_DATABASE_URL). The handler's buffer is allocated once,
// outside the loop, so B/op is what the middleware and the store allocate
// per request, and "copies" is B/op over 10 MiB: how many times the body was
// copied in all. "peak-copies" is the largest growth of the heap during a
// request over 10 MiB: how many copies were held at once. It is sampled
// every 100µs with the garbage collector made eager (GOGC=5), so garbage
// does not count for long.
func BenchmarkLargeResponse(b *testing.B) {
	const size = 10 << 20
	payload := []byte(strings.Repeat("0123456789abcdef", size/16))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"application/octet-stream"}
		w.Header()["Content-Length"] = []string{strconv.Itoa(size)}
		w.WriteHeader(http.StatusCreated)
		// Written in 1 MiB pieces, as a handler streaming a file would.
		for p := payload; len(p) > 0; {
			n := min(len(p), 1<<20)
			_, _ = w.Write(p[:n])
			p = p[n:]
		}
	})
	opts := middleware.Options{MaxRecordBytes: 16 << 20}
	stores := []struct {
		name string
		open func(b *testing.B, replay bool) idem.Store
		// cached: replays are served from memory once the cache holds
		// the result, which takes a replay read from the database
		// after the cache's LISTEN is up.
		cached bool
	}{
		{"memstore", func(b *testing.B, replay bool) idem.Store {
			// The heap must not grow by 10 MiB per request. A replay
			// needs one result, retained; new keys need results that
			// expire at once, which the store, bounded, reclaims when
			// it fills (it never evicts a retained one).
			if replay {
				return memstore.New(memstore.Options{Capacity: 1})
			}
			return memstore.New(memstore.Options{Capacity: 1, Retention: time.Nanosecond})
		}, false},
		{"pgstore", func(b *testing.B, _ bool) idem.Store { return openPgstore(b, pgstore.Options{}) }, false},
		// With the replay cache, a replay is served from memory: what
		// the claim statement returned once, not a fresh decode.
		{"pgstore-cached", func(b *testing.B, _ bool) idem.Store {
			return openPgstore(b, pgstore.Options{ReplayCacheBytes: 256 << 20})
		}, true},
	}
	for _, st := range stores {
		for _, replay := range []bool{false, true} {
			name := st.name + "/first"
			if replay {
				name = st.name + "/replay"
			}
			b.Run(name, func(b *testing.B) {
				h := middleware.New(st.open(b, replay), opts)(handler)
				w := &sinkWriter{h: http.Header{}}
				if replay {
					h.ServeHTTP(w, overheadRequest(`"large"`))
				}
				if replay && st.cached {
					// Replay until one allocates less than the body:
					// from then on the result comes from the cache.
					var ms0, ms1 runtime.MemStats
					for try := 0; ; try++ {
						runtime.ReadMemStats(&ms0)
						h.ServeHTTP(w, overheadRequest(`"large"`))
						runtime.ReadMemStats(&ms1)
						if ms1.TotalAlloc-ms0.TotalAlloc < size/2 {
							break
						}
						if try == 100 {
							b.Fatal("replays never came from the cache")
						}
					}
				}
				prev := debug.SetGCPercent(5)
				defer debug.SetGCPercent(prev)
				var (
					peak          uint64
					before, after runtime.MemStats
				)
				i := 0
				b.ReportAllocs()
				runtime.ReadMemStats(&before)
				for b.Loop() {
					key := `"large"`
					if !replay {
						key = `"large-` + strconv.Itoa(i) + `"`
						i++
					}
					clear(w.h)
					w.n = 0
					peak = max(peak, heapGrowth(func() { h.ServeHTTP(w, overheadRequest(key)) }))
					if w.n != size || (w.h.Get(middleware.ReplayedHeader) == "true") != replay {
						b.Fatalf("got %d bytes, replayed %q", w.n, w.h.Get(middleware.ReplayedHeader))
					}
				}
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/size, "copies")
				b.ReportMetric(float64(peak)/size, "peak-copies")
			})
		}
	}
}

// heapGrowth runs f and returns by how much the heap's allocated objects
// grew above what they were when f started, at most, sampled every 100µs.
func heapGrowth(f func()) uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC()
	base := read()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var peak uint64
		t := time.NewTicker(100 * time.Microsecond)
		defer t.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-stop:
				done <- peak
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	peak := max(<-done, read())
	if peak < base {
		return 0
	}
	return peak - base
}

func openPgstore(b *testing.B, opts pgstore.Options) *pgstore.Store {
	pool, _ := testdb.Pool(b)
	if err := migrations.Up(b.Context(), pool, migrations.Options{}); err != nil {
		b.Fatal(err)
	}
	s, err := pgstore.New(pool, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s
}
