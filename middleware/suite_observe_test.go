package middleware_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/middleware"
)

// suiteObserve runs the suite's tests of what the handler and the operator
// see: TokenFrom, events, logs.
func suiteObserve(t *testing.T, newStore newKit) {
	t.Run("TokenFrom", func(t *testing.T) {
		t.Parallel()
		var tok idem.Token
		var ok bool
		f := setup(t, newStore, middleware.Options{Scope: fixedScope}, func(*fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { tok, ok = middleware.TokenFrom(r.Context()) }
		})
		serve(f.h, newReq("POST", "/a", `{}`, key("k")))
		k, _ := idem.ParseClientKey("k")
		if !ok || tok.Scope != "tenant" || tok.Key != k || tok.Generation <= 0 {
			t.Fatalf("TokenFrom = %v, %v", tok, ok)
		}
		serve(f.h, newReq("GET", "/a", ``))
		if ok {
			t.Fatal("TokenFrom reports a token for an unprotected request")
		}
	})

	t.Run("Observer", func(t *testing.T) {
		t.Parallel()
		var events idemtest.Events
		release := make(chan struct{})
		running := make(chan struct{}, 1)
		f := setup(t, newStore, middleware.Options{Engine: engine.Options{Wait: -1}, Observer: events.ObserveHTTP}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/slow" {
					running <- struct{}{}
					<-release
				}
				if r.URL.Path == "/fail" {
					w.WriteHeader(http.StatusInternalServerError)
				}
			}
		})
		serve(f.h, newReq("POST", "/a", `1`, key("k")))    // claimed, completed
		serve(f.h, newReq("POST", "/a", `1`, key("k")))    // replayed
		serve(f.h, newReq("POST", "/a", `2`, key("k")))    // mismatch
		serve(f.h, newReq("POST", "/fail", `1`, key("k"))) // claimed, released
		done := make(chan struct{})
		go func() { defer close(done); serve(f.h, newReq("POST", "/slow", `1`, key("k"))) }()
		<-running
		serve(f.h, newReq("POST", "/slow", `1`, key("k"))) // in flight
		close(release)
		<-done
		want := map[idem.EventKind]int{
			idem.EventClaimed: 3, idem.EventCompleted: 2, idem.EventReplayed: 1,
			idem.EventMismatch: 1, idem.EventReleased: 1, idem.EventInFlight: 1,
		}
		for kind, n := range want {
			if got := events.Count(kind); got != n {
				t.Errorf("%v events: %d, want %d (all: %v)", kind, got, n, events.Kinds())
			}
		}
	})

	t.Run("KeysNotLoggedInClear", func(t *testing.T) {
		t.Parallel()
		var buf testlog.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		f := setup(t, newStore, middleware.Options{Engine: engine.Options{Logger: logger}}, func(f *fixture) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }
		})
		serve(f.h, newReq("POST", "/a", `1`, key("secret-key-42")))
		serve(f.h, newReq("POST", "/a", `1`, key("secret-key-42")))
		out := buf.String()
		if !strings.Contains(out, "key_digest=") {
			t.Fatalf("no key_digest in the log: %s", out)
		}
		if strings.Contains(out, "secret-key-42") {
			t.Fatalf("key logged in clear at info level: %s", out)
		}
	})
}
