package middleware_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/internal/teststore"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// waitSignal is memstore that says when a duplicate starts waiting.
type waitSignal struct {
	*memstore.Store
	waiting chan struct{}
}

func (s waitSignal) Wait(ctx context.Context, scope string, key idem.Key) error {
	select {
	case s.waiting <- struct{}{}:
	default:
	}
	return s.Store.Wait(ctx, scope, key)
}

// TestServerCancelledWait: a duplicate waiting for the original, whose
// request context the server ends while its client is still connected (a
// shutdown that cancels its requests once its bound runs out, as the demo
// and the robustness harness's service do), is told to retry: 503 with
// Retry-After. Found by the robustness harness (integration/robustness,
// a SIGTERM fault): the middleware took the ended context for a client that
// had left and wrote nothing, so net/http answered the connected client
// 200 OK with an empty body.
func TestServerCancelledWait(t *testing.T) {
	t.Parallel()
	store := waitSignal{memstore.New(memstore.Options{}), make(chan struct{}, 1)}
	key, _ := idem.ParseClientKey("k")
	if _, err := store.Claim(t.Context(), idem.ClaimRequest{Scope: "s", Key: key, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	protect := middleware.New(store, middleware.Options{Engine: engine.Options{Wait: time.Minute}, Scope: func(*http.Request) string { return "s" }})
	handler := protect(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("the handler ran for a key held by another request")
	}))
	shutdown, cancelRequests := context.WithCancel(context.Background())
	srv := quietServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer context.AfterFunc(shutdown, cancel)()
		handler.ServeHTTP(w, r.WithContext(ctx))
	}))
	go func() {
		<-store.waiting
		cancelRequests()
	}()
	resp, err := postKey(t.Context(), srv.URL, "k")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("answered %d (Retry-After %q) %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}

// TestLeaseOverBeforeTheHandler: engine.TestSynctestLeaseOverBeforeTheWork
// through the middleware. A handler that ignores its context is not
// called (the key may be another request's by then); the client gets 503
// with Retry-After, and its retry runs the handler once.
func TestLeaseOverBeforeTheHandler(t *testing.T) {
	t.Parallel()
	teststore.LeaseOverBeforeTheWork(t, func(t *testing.T, store idem.Store, opts engine.Options) {
		runs := 0
		h := middleware.New(store, middleware.Options{Engine: opts})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			runs++
			w.WriteHeader(http.StatusCreated)
		}))
		post := func() *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":1}`))
			req.Header.Set("Idempotency-Key", "k")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec
		}
		first := post()
		if runs != 0 || first.Code != http.StatusServiceUnavailable || first.Header().Get("Retry-After") == "" ||
			!strings.Contains(first.Body.String(), middleware.TypeStoreUnavailable) {
			t.Fatalf("the handler ran %d times; answered %d (Retry-After %q) %s, want no run and 503 %s with Retry-After",
				runs, first.Code, first.Header().Get("Retry-After"), first.Body, middleware.TypeStoreUnavailable)
		}
		if retry := post(); runs != 1 || retry.Code != http.StatusCreated {
			t.Fatalf("the retry answered %d %s, the handler ran %d times; want 201, once", retry.Code, retry.Body, runs)
		}
	})
}
