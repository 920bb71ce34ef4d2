package middleware_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// Mounting the middleware on the routes of an http.ServeMux, with the
// in-memory store. A retry with the same Idempotency-Key replays the first
// answer instead of creating a second invoice.
func Example() {
	store := memstore.New(memstore.Options{})
	protect := middleware.New(store, middleware.Options{Principal: userOf})

	invoices := 0
	mux := http.NewServeMux()
	mux.Handle("POST /invoices", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		invoices++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, invoices)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post := func(key, body string) {
		req, _ := http.NewRequest("POST", srv.URL+"/invoices", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), bytes.TrimSuffix(b, []byte("\n")))
	}
	post(`"8e03978e"`, `{"amount_cents":100}`) // runs
	post(`"8e03978e"`, `{"amount_cents":100}`) // a retry: replayed
	post(`"8e03978e"`, `{"amount_cents":999}`) // the key reused for another request
	post(``, `{"amount_cents":100}`)           // no key
	fmt.Println("invoices created:", invoices)
	// Output:
	// 201 replayed="" {"id":1}
	// 201 replayed="true" {"id":1}
	// 422 replayed="" {"type":"https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeMismatch","title":"Idempotency-Key reused for a different request","status":422,"detail":"This Idempotency-Key was used for a different request (method, path, query, content type or body differ). Use a new key for a new request."}
	// 400 replayed="" {"type":"https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeMissingKey","title":"Idempotency-Key required","status":400,"detail":"POST requests must carry an Idempotency-Key header, so that a retry does not run them twice."}
	// invoices created: 1
}

// userOf is the examples' Principal: the user the service's authentication
// middleware, run before idem's, stored in the request's context (see
// ExampleOptions_principal), so that a retry sent with a refreshed token
// finds its key.
func userOf(r *http.Request) string {
	user, _ := r.Context().Value(userKey{}).(string)
	return user
}
