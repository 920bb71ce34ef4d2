package middleware_test

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// TestReplayHeadersAreCopies: an outer middleware that edits a response
// header's values in place (it prefixes Location) gets the same answer on
// every replay: the recorded values are copied into each replay's header
// map, never handed out, so an edit cannot reach the record (a memstore's,
// or pgstore's replay cache) and corrupt the next replay.
func TestReplayHeadersAreCopies(t *testing.T) {
	t.Parallel()
	h := middleware.New(memstore.New(memstore.Options{}), middleware.Options{Scope: fixedScope})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", "/invoices/1")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
		}))
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(prefixLocation{w}, r)
	})
	for i := range 3 {
		rec := serve(outer, newReq("POST", "/invoices", `{}`, key("k")))
		if got := rec.Header().Get("Location"); rec.Code != http.StatusCreated || got != "/api/invoices/1" {
			t.Fatalf("answer %d: %d with Location %q, want 201 with /api/invoices/1", i, rec.Code, got)
		}
	}
}

// prefixLocation is an outer middleware's writer that rewrites Location in
// place, as it is sent.
type prefixLocation struct{ http.ResponseWriter }

func (p prefixLocation) WriteHeader(code int) {
	if vs := p.Header()["Location"]; len(vs) > 0 {
		vs[0] = "/api" + vs[0]
	}
	p.ResponseWriter.WriteHeader(code)
}

func (p prefixLocation) Write(b []byte) (int, error) { return p.ResponseWriter.Write(b) }
