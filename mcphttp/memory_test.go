package mcphttp_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/idemkit/idem/mcphttp"
	"github.com/idemkit/idem/memstore"
)

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// countingWriter is a client that reads and drops the stream, counting it.
type countingWriter struct {
	h       http.Header
	status  int
	n       int64
	flushes int
	last    []byte // the tail of the stream, to find the final response
}

func (w *countingWriter) Header() http.Header { return w.h }
func (w *countingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	w.last = append(w.last[:0], p[max(0, len(p)-256):]...)
	return len(p), nil
}
func (w *countingWriter) Flush() { w.flushes++ }

// TestSSEStreamMemoryIsFlat streams 100 MiB of SSE progress events and then
// the call's response through the wrapper, and samples the heap as it goes.
// The wrapper looks at one event at a time and drops it: the heap must not
// grow with the stream. A wrapper that buffered the stream (to record it, or
// to hold it back until the call ends) would grow by about 100 MiB and fail
// the 16 MiB bound. Not parallel: the heap is the whole process's.
//
// Under the race detector, which makes every byte the wrapper scans about ten
// times slower, the stream is 48 MiB: still three times the bound, so a
// buffering wrapper fails there too, and the test stays short.
func TestSSEStreamMemoryIsFlat(t *testing.T) {
	const (
		eventSize = 16 << 10
		bound     = 16 << 20
	)
	total := 100 << 20
	if raceEnabled() {
		total = 48 << 20
	}
	pad := strings.Repeat("x", eventSize-200)
	var (
		peak, base uint64
		ms         runtime.MemStats
	)
	sample := func() {
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}
	executions := 0
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg, _ := io.ReadAll(r.Body)
		if bytes.Contains(msg, []byte(`"method":"ping"`)) {
			// The wrapper's probe before it answers a retry.
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
			return
		}
		executions++
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		var buf bytes.Buffer
		written, nextSample := 0, 0
		for i := 0; written < total; i++ {
			buf.Reset()
			fmt.Fprintf(&buf, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":%d,\"message\":%q}}\n\n", i, pad)
			n, _ := w.Write(buf.Bytes())
			w.(http.Flusher).Flush()
			written += n
			if written >= nextSample {
				sample()
				nextSample += 1 << 20
			}
		}
		_, _ = io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"done\"}]}}\n\n")
		sample()
	})
	store := memstore.New(memstore.Options{})
	h := mcphttp.New(store, mcphttp.Options{})(inner)

	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"stream","arguments":{}}}`
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", "memory-test")
	w := &countingWriter{h: http.Header{}}

	runtime.GC()
	runtime.ReadMemStats(&ms)
	base = ms.HeapInuse
	h.ServeHTTP(w, req)

	if w.n < int64(total) {
		t.Fatalf("the client got %d bytes, want at least %d: the stream was not passed through", w.n, total)
	}
	if w.flushes < total/eventSize {
		t.Errorf("the client saw %d flushes for %d events: the stream was held back", w.flushes, total/eventSize)
	}
	if !bytes.Contains(w.last, []byte(`"text":"done"`)) {
		t.Errorf("the stream does not end with the call's response: %q", w.last)
	}
	growth := int64(peak) - int64(base)
	t.Logf("HeapInuse: %.1f MiB before, peak %.1f MiB while streaming %d MiB (growth %.1f MiB)",
		float64(base)/(1<<20), float64(peak)/(1<<20), total>>20, float64(growth)/(1<<20))
	if growth > bound {
		t.Errorf("heap grew by %.1f MiB while streaming %d MiB, want under %d MiB: the stream is being buffered",
			float64(growth)/(1<<20), total>>20, bound>>20)
	}

	// The call's response, not the stream, is what was recorded: a retry
	// is answered from the store without running the handler.
	retry := httptest.NewRecorder()
	req2, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(body))
	req2.Header = req.Header.Clone()
	h.ServeHTTP(retry, req2)
	if executions != 1 {
		t.Fatalf("the tool ran %d times, want once: the retry was not answered from the store", executions)
	}
	if got := retry.Body.String(); !strings.Contains(got, `"text":"done"`) || len(got) > 4096 {
		t.Errorf("the retry got %d bytes %.200q, want the recorded response alone", len(got), got)
	}
}
