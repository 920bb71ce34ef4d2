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
	resp, err := postKey(context.Background(), url, k)
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

// TestReverseProxyHangUp: idem in front of httputil.ReverseProxy, whose
// upstream takes 300 ms and answers 201 with 256 KiB. A client that hangs up
// before the upstream answers, or after 4 KiB of its body, retries a second
// later: the upstream ran once, and the retry gets the whole answer as a
// replay. (Behind a proxy, a hang-up becomes a 502 or an
// http.ErrAbortHandler panic; releasing the key on either would run the
// upstream again.)
func TestReverseProxyHangUp(t *testing.T) {
	t.Parallel()
	const size = 256 << 10
	want := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	for _, tc := range []struct {
		name   string
		hangUp func(t *testing.T, url string)
	}{
		{"before the upstream answers", func(t *testing.T, url string) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if resp, err := postKey(ctx, url, "proxied"); err == nil {
				resp.Body.Close()
				t.Fatal("the request did not time out")
			}
		}},
		{"after 4 KiB of the body", func(t *testing.T, url string) {
			resp, err := postKey(context.Background(), url, "proxied")
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
			upstream := quietServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				time.Sleep(300 * time.Millisecond)
				w.Header().Set("Content-Type", "application/octet-stream")
				w.WriteHeader(http.StatusCreated)
				// In 16 KiB pieces, 10 ms apart: the body is still
				// on its way when the client hangs up.
				for p := want; len(p) > 0; p = p[16<<10:] {
					w.Write(p[:16<<10])
					w.(http.Flusher).Flush()
					time.Sleep(10 * time.Millisecond)
				}
			}))
			target, _ := url.Parse(upstream.URL)
			proxy := httputil.NewSingleHostReverseProxy(target)
			proxy.ErrorLog = log.New(io.Discard, "", 0)
			front := quietServer(t, middleware.New(memstore.New(memstore.Options{}), middleware.Options{})(proxy))

			tc.hangUp(t, front.URL)
			time.Sleep(time.Second)
			resp, body := retry(t, front.URL, "proxied")
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

// slowReader hands out its bytes 32 KiB at a time, 5 ms apart, so that a
// handler copying it is still writing when the client hangs up. It has no
// WriteTo: io.Copy writes it piece by piece.
type slowReader struct{ r io.Reader }

func (s slowReader) Read(p []byte) (int, error) {
	time.Sleep(5 * time.Millisecond)
	return s.r.Read(p[:min(len(p), 32<<10)])
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
	front := quietServer(t, middleware.New(memstore.New(memstore.Options{}), middleware.Options{})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/octet-stream")
			_, err := io.Copy(w, slowReader{bytes.NewReader(want)})
			copied <- err
		})))

	resp, err := postKey(context.Background(), front.URL, "copied")
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
	front := quietServer(t, middleware.New(memstore.New(memstore.Options{}), middleware.Options{CancelWithClient: true})(http.HandlerFunc(
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
	ctx, cancel := context.WithCancel(context.Background())
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := retry(t, front.URL, "cancelled")
		if resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			if resp.StatusCode != http.StatusCreated || resp.Header.Get(middleware.ReplayedHeader) != "" || calls.Load() != 2 {
				t.Fatalf("retry got %d (replayed %q) after %d runs; want a fresh run", resp.StatusCode, resp.Header.Get(middleware.ReplayedHeader), calls.Load())
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
