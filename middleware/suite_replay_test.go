package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/middleware"
)

// suiteReplay runs the suite's tests of first request and replay: what is
// recorded, what is released, Commit.
func suiteReplay(t *testing.T, newStore newKit) {
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

	t.Run("Streaming", func(t *testing.T) {
		t.Parallel()
		testStreaming(t, newStore)
	})

	t.Run("Commit", func(t *testing.T) {
		t.Parallel()
		testCommit(t, newStore)
	})
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
	var events idemtest.Events
	h := middleware.New(kit.store, middleware.Options{Observer: events.ObserveHTTP})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		if got := events.Count(kind); got != n {
			t.Fatalf("%v events: %d, want %d (all: %v)", kind, got, n, events.Kinds())
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
