// Package testhttp is the client side of the tests that send HTTP requests
// to a server in another process (the demo under faults, instances under
// a failover): a client that keeps no connection, and the answer read
// whole.
package testhttp

import (
	"context"
	"io"
	"net/http"
	"strings"
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
