package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// TestRefusalsReported: every answer the middleware gives instead of the
// handler before a claim, and every request it lets run unprotected, is
// reported with its reason and logged; the problem's detail names what is
// wrong without a Go package's prefix, and its body ends with a newline.
func TestRefusalsReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		opts    middleware.Options
		store   idem.Store
		body    string
		header  []string
		want    idem.Event
		status  int
		problem string
		log     string
	}{
		{name: "missing key", header: nil,
			want: idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedMissingKey, Status: 400}, status: 400,
			problem: `"detail":"POST requests must carry an Idempotency-Key header, so that a retry does not run them twice."}` + "\n",
			log:     `level=INFO msg="idempotency middleware refused a request" reason=missing_key status=400 adapter=http`},
		{name: "empty key", header: []string{"Idempotency-Key", ""},
			want: idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedInvalidKey, Status: 400}, status: 400,
			problem: `"detail":"Idempotency-Key: empty"}` + "\n",
			log:     `reason=invalid_key status=400`},
		{name: "body too large", opts: middleware.Options{MaxBodyBytes: 4}, body: "12345", header: []string{"Idempotency-Key", "k"},
			want: idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedBodyTooLarge, Status: 413}, status: 413,
			problem: `"detail":"The request body is larger than 4 bytes."}` + "\n",
			log:     `reason=body_too_large status=413 adapter=http key_digest=`},
		{name: "unscoped cookies", header: []string{"Idempotency-Key", "k", "Cookie", "sid=1"},
			want: idem.Event{Kind: idem.EventRefused, Reason: idem.RefusedUnscopedCookies, Status: 500}, status: 500,
			log: `reason=unscoped_cookies status=500`},
		{name: "key optional", opts: middleware.Options{KeyOptional: true},
			want: idem.Event{Kind: idem.EventUnprotected, Reason: idem.UnprotectedNoKey}, status: 201},
		{name: "fail open", opts: middleware.Options{FailOpen: true}, store: failingClaims{memstore.New(memstore.Options{})}, header: []string{"Idempotency-Key", "k"},
			want: idem.Event{Kind: idem.EventUnprotected, Reason: idem.UnprotectedFailOpen}, status: 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var events []idem.Event
			var logs bytes.Buffer
			tc.opts.Observer = func(_ *http.Request, e idem.Event) {
				if e.Kind == idem.EventRefused || e.Kind == idem.EventUnprotected {
					events = append(events, e)
				}
			}
			tc.opts.Engine.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			store := tc.store
			if store == nil {
				store = memstore.New(memstore.Options{})
			}
			ran := false
			h := middleware.New(store, tc.opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran = true
				w.WriteHeader(http.StatusCreated)
			}))
			req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(tc.body))
			for i := 0; i < len(tc.header); i += 2 {
				req.Header[tc.header[i]] = []string{tc.header[i+1]}
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status || ran != (tc.status == 201) {
				t.Fatalf("status %d, handler ran %v; want %d", rec.Code, ran, tc.status)
			}
			if tc.status != 201 && !strings.HasSuffix(rec.Body.String(), "}\n") {
				t.Errorf("problem body %q does not end with a newline", rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tc.problem) {
				t.Errorf("problem %s, want %s in it", rec.Body, tc.problem)
			}
			tc.want.Adapter = middleware.AdapterName
			if len(events) != 1 || events[0].Kind != tc.want.Kind || events[0].Reason != tc.want.Reason ||
				events[0].Status != tc.want.Status || events[0].Adapter != tc.want.Adapter {
				t.Fatalf("events %+v, want one %+v", events, tc.want)
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log %q, want %q in it", logs.String(), tc.log)
			}
		})
	}
}

// failingClaims fails every claim, as an unreachable store does.
type failingClaims struct{ idem.Store }

func (failingClaims) Claim(context.Context, idem.ClaimRequest) (idem.Claim, error) {
	return idem.Claim{}, &idem.UnavailableError{Op: "claim", Err: errors.New("connection refused")}
}
