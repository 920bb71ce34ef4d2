package middleware_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testhttp"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// oneShotClient opens a connection per request, so a connection a test
// hung up on is never reused.
var oneShotClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// quietServer is an httptest server whose error log (the panics net/http
// recovers, ReverseProxy's errors) is discarded.
func quietServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

func postKey(ctx context.Context, url, k string) (*http.Response, error) {
	r, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(`{"amount":1}`)))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", `"`+k+`"`)
	return oneShotClient.Do(r)
}

// retry posts k again and reads the whole answer.
func retry(t *testing.T, url, k string) (*http.Response, []byte) {
	t.Helper()
	resp, err := postKey(t.Context(), url, k)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// waitGone waits until the front server saw the client hang up, failing
// the test if it has not within 10 s.
func waitGone(t *testing.T, gone <-chan struct{}) {
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Error("the server did not see the client hang up")
	}
}

// waitEnded waits until the middleware completed or released the key of a
// request that runs on: the first request's end, before its retry.
func waitEnded(t *testing.T, events *idemtest.Events) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := events.WaitAny(ctx, idem.EventCompleted, idem.EventReleased); err != nil {
		t.Fatalf("the first request did not end: %v (events: %v)", err, events.Kinds())
	}
}

// TestReverseProxyHangUp: idem in front of httputil.ReverseProxy, whose
// upstream answers 201 with 256 KiB. A client that hangs up before the
// upstream answers, or after 4 KiB of its body, retries once the first
// request ended: the upstream ran once, and the retry gets the whole answer
// as a replay. (Behind a proxy, a hang-up becomes a 502 or an
// http.ErrAbortHandler panic; releasing the key on either would run the
// upstream again.) The upstream holds back its answer, or the rest of its
// body, until the front server saw the client hang up.
func TestReverseProxyHangUp(t *testing.T) {
	t.Parallel()
	const size, piece = 256 << 10, 16 << 10
	want := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	for _, tc := range []struct {
		name string
		// sent is how much of the body the upstream sends before the
		// client hangs up; -1: not even the status.
		sent   int
		hangUp func(t *testing.T, url string, started <-chan struct{})
	}{
		{"before the upstream answers", -1, func(t *testing.T, url string, started <-chan struct{}) {
			ctx, cancel := context.WithCancel(t.Context())
			sent := make(chan error, 1)
			go func() {
				resp, err := postKey(ctx, url, "proxied")
				if err == nil {
					resp.Body.Close()
				}
				sent <- err
			}()
			<-started
			cancel()
			if err := <-sent; err == nil {
				t.Fatal("the request was not cut off")
			}
		}},
		{"after 4 KiB of the body", piece, func(t *testing.T, url string, _ <-chan struct{}) {
			resp, err := postKey(t.Context(), url, "proxied")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(resp.Body, make([]byte, 4<<10)); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close() // unread body: the connection is closed
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			started := make(chan struct{}, 1)
			gone := make(chan struct{})
			upstream := quietServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				answer := func() {
					w.Header().Set("Content-Type", "application/octet-stream")
					w.WriteHeader(http.StatusCreated)
				}
				rest := want
				if tc.sent >= 0 {
					answer()
					w.Write(rest[:tc.sent])
					w.(http.Flusher).Flush()
					rest = rest[tc.sent:]
				}
				select {
				case started <- struct{}{}:
				default:
				}
				waitGone(t, gone)
				if tc.sent < 0 {
					answer()
				}
				// In pieces, flushed: the rest of the body goes
				// through the middleware after the hang-up.
				for p := rest; len(p) > 0; p = p[piece:] {
					w.Write(p[:piece])
					w.(http.Flusher).Flush()
				}
			}))
			target, _ := url.Parse(upstream.URL)
			proxy := httputil.NewSingleHostReverseProxy(target)
			proxy.ErrorLog = log.New(io.Discard, "", 0)
			var events idemtest.Events
			srv := quietServer(t, testhttp.HangUps(gone, middleware.New(memstore.New(memstore.Options{}), middleware.Options{Observer: events.ObserveHTTP})(proxy)))

			tc.hangUp(t, srv.URL, started)
			waitEnded(t, &events)
			resp, body := retry(t, srv.URL, "proxied")
			if n := calls.Load(); n != 1 {
				t.Fatalf("the upstream ran %d times, want 1", n)
			}
			if resp.StatusCode != http.StatusCreated || !bytes.Equal(body, want) || resp.Header.Get(middleware.ReplayedHeader) != "true" {
				t.Fatalf("retry got %d, %d bytes (equal: %v), %s %q; want 201 with the whole body, replayed",
					resp.StatusCode, len(body), bytes.Equal(body, want), middleware.ReplayedHeader, resp.Header.Get(middleware.ReplayedHeader))
			}
		})
	}
}

// heldReader hands out its first n bytes, then waits for gone before the
// rest, so that a handler copying it is still writing when the client
// hangs up. It has no WriteTo: io.Copy writes it piece by piece.
type heldReader struct {
	r    io.Reader
	n    int
	gone <-chan struct{}
	t    *testing.T
}

func (h *heldReader) Read(p []byte) (int, error) {
	if h.n <= 0 {
		waitGone(h.t, h.gone)
	} else if len(p) > h.n {
		p = p[:h.n]
	}
	n, err := h.r.Read(p[:min(len(p), 32<<10)])
	h.n -= n
	return n, err
}

// TestCopyTruncatedByHangUp: a handler that io.Copy's 1 MiB stops at its
// first failed write; the client closed at 64 KiB. Whatever the retry gets,
// it is never a shorter 2xx passed off as the answer.
func TestCopyTruncatedByHangUp(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	want := bytes.Repeat([]byte("abcdefgh"), size/8)
	var calls atomic.Int64
	copied := make(chan error, 2)
	gone := make(chan struct{})
	front := quietServer(t, testhttp.HangUps(gone, middleware.New(memstore.New(memstore.Options{}), middleware.Options{})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/octet-stream")
			// 96 KiB: the client's 64 KiB are through whatever
			// net/http buffers; the rest waits for the hang-up.
			_, err := io.Copy(w, &heldReader{r: bytes.NewReader(want), n: 96 << 10, gone: gone, t: t})
			copied <- err
		}))))

	resp, err := postKey(t.Context(), front.URL, "copied")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-copied

	resp, body := retry(t, front.URL, "copied")
	if resp.StatusCode/100 == 2 && len(body) != size {
		t.Fatalf("retry got %d with %d bytes (replayed %q); a 2xx must carry the whole %d bytes",
			resp.StatusCode, len(body), resp.Header.Get(middleware.ReplayedHeader), size)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

// TestCancelWithClient: with the option, a client that hangs up ends the
// handler's context; the handler, cut off, answers a failure, and the key is
// released: the retry runs it again.
func TestCancelWithClient(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	started := make(chan struct{}, 2)
	var events idemtest.Events
	front := quietServer(t, middleware.New(memstore.New(memstore.Options{}), middleware.Options{Engine: engine.Options{CancelWithClient: true}, Observer: events.ObserveHTTP})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			n := calls.Add(1)
			started <- struct{}{}
			if n == 1 {
				<-r.Context().Done()
				http.Error(w, "cancelled", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})))
	ctx, cancel := context.WithCancel(t.Context())
	sent := make(chan error, 1)
	go func() {
		resp, err := postKey(ctx, front.URL, "cancelled")
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	<-started
	cancel()
	<-sent
	waitEnded(t, &events)
	if n := events.Count(idem.EventReleased); n != 1 {
		t.Fatalf("the cut-off handler's key: %v, want released", events.Kinds())
	}
	resp, _ := retry(t, front.URL, "cancelled")
	if resp.StatusCode != http.StatusCreated || resp.Header.Get(middleware.ReplayedHeader) != "" || calls.Load() != 2 {
		t.Fatalf("retry got %d (replayed %q) after %d runs; want a fresh run", resp.StatusCode, resp.Header.Get(middleware.ReplayedHeader), calls.Load())
	}
}
