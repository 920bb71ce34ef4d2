package middleware_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// TestTimeoutHandlerEndsTheWork: the middleware behind http.TimeoutHandler
// (100 ms), lease 3 s. The handler's context keeps the request's deadline,
// so a handler that waits on it stops when TimeoutHandler answers 503; it
// answers a failure, its key is released, and the client's retry runs the
// handler again instead of being told for ever that the key is in flight.
func TestTimeoutHandlerEndsTheWork(t *testing.T) {
	t.Parallel()
	type ended struct {
		hadDeadline bool
		cause       error
	}
	first := make(chan ended, 1)
	var runs atomic.Int64
	var events idemtest.Events
	h := middleware.New(memstore.New(memstore.Options{}), middleware.Options{Engine: engine.Options{Lease: 3 * time.Second, Wait: -1}, Scope: fixedScope, Observer: events.ObserveHTTP})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) > 1 {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "second run")
				return
			}
			_, ok := r.Context().Deadline()
			select {
			case <-r.Context().Done():
				first <- ended{ok, context.Cause(r.Context())}
			case <-time.After(4 * time.Second):
				first <- ended{ok, nil}
			}
			http.Error(w, "gave up", http.StatusServiceUnavailable)
		}))
	srv := quietServer(t, http.TimeoutHandler(h, 100*time.Millisecond, "timed out"))

	// TimeoutHandler's 503, or the handler's own if it wrote first: the
	// handler's context ends at the same deadline.
	if resp, body := retry(t, srv.URL, "timeout"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first request: %d %q, want 503", resp.StatusCode, body)
	}
	select {
	case end := <-first:
		if !end.hadDeadline || !errors.Is(end.cause, engine.ErrExecutionTimeout) {
			t.Fatalf("the handler's context had a deadline: %v; ended with cause %v; want the request's deadline to end it", end.hadDeadline, end.cause)
		}
	case <-time.After(2 * time.Second):
		resp, body := retry(t, srv.URL, "timeout")
		t.Fatalf("2 s after TimeoutHandler's 503 the handler still runs; a retry gets %d %s", resp.StatusCode, body)
	}
	// The release follows the handler's return: wait for it, then retry.
	waitEnded(t, &events)
	if resp, body := retry(t, srv.URL, "timeout"); resp.StatusCode != http.StatusCreated || string(body) != "second run" {
		t.Fatalf("retry: %d %s, want the handler to run again (201); events %v", resp.StatusCode, body, events.Kinds())
	}
}
