// Package testhttp holds the HTTP helpers of tests: for those that send
// requests to a server in another process (the demo under faults,
// instances under a failover), a client that keeps no connection, the
// answer read whole, and [Failures] to collect what the clients found
// wrong; for those that watch a server, [HangUps].
package testhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Response is what a test keeps of an HTTP answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// NewClient returns an HTTP client without keep-alive, whose requests time
// out after timeout (zero: never): no connection to a killed process is
// reused, and none outlives a test (goleak).
func NewClient(timeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: timeout}
}

// Post sends POST url with body as application/json and the headers
// (name, value pairs), and returns the answer; an error says no answer
// arrived.
func Post(ctx context.Context, c *http.Client, url, body string, header ...string) (Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return Do(c, req)
}

// Do sends req with c and returns the answer, its body read whole.
func Do(c *http.Client, req *http.Request) (Response, error) {
	resp, err := c.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// HangUps wraps h with what tells a test the client hung up: outside the
// adapter under test a request's context is the client's, and net/http ends
// it when the client closes its connection while h runs. gone is closed at
// the first such hang-up.
func HangUps(gone chan struct{}, h http.Handler) http.Handler {
	hungUp := sync.OnceFunc(func() { close(gone) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stop := context.AfterFunc(r.Context(), hungUp)
		defer stop()
		h.ServeHTTP(w, r)
	})
}

// Failures collects what a load's clients found wrong, from any of their
// goroutines. The zero value is ready to use.
type Failures struct {
	mu   sync.Mutex
	msgs []string
}

// Add records msg.
func (f *Failures) Add(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, msg)
}

// Err lists what was recorded, or is nil if nothing was.
func (f *Failures) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%d load errors:\n%s", len(f.msgs), strings.Join(f.msgs, "\n"))
}
