package middleware_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/middleware"
)

// suiteKeys runs the suite's tests of the key header: missing, optional,
// malformed, its forms, the methods it applies to.
func suiteKeys(t *testing.T, newStore newKit) {
	t.Run("MissingKey", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		for _, m := range []string{http.MethodPost, http.MethodPatch} {
			rec := serve(f.h, newReq(m, "/invoices", `{}`))
			wantProblem(t, rec, http.StatusBadRequest, middleware.TypeMissingKey)
		}
		wantCalls(t, f, 0)
	})

	t.Run("KeyOptional", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{KeyOptional: true}, nil)
		serve(f.h, newReq("POST", "/invoices", `{}`))
		rec := serve(f.h, newReq("POST", "/invoices", `{}`))
		wantStatus(t, rec, http.StatusCreated)
		wantCalls(t, f, 2)
	})

	t.Run("MalformedKey", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		long := strings.Repeat("k", 256)
		for name, opts := range map[string][]reqOpt{
			"empty string":       {hdr("Idempotency-Key", `""`)},
			"empty bare":         {hdr("Idempotency-Key", ``)},
			"too long":           {hdr("Idempotency-Key", `"`+long+`"`)},
			"too long bare":      {hdr("Idempotency-Key", long)},
			"list":               {hdr("Idempotency-Key", `"a", "b"`)},
			"bare list":          {hdr("Idempotency-Key", `a,b`)},
			"two lines":          {hdr("Idempotency-Key", `"a"`), hdr("Idempotency-Key", `"a"`)},
			"control char":       {hdr("Idempotency-Key", "\"a\x01b\"")},
			"tab inside":         {hdr("Idempotency-Key", "\"a\tb\"")},
			"non-ASCII":          {hdr("Idempotency-Key", `"schlüssel"`)},
			"bad escape":         {hdr("Idempotency-Key", `"a\nb"`)},
			"unterminated":       {hdr("Idempotency-Key", `"abc`)},
			"parameters":         {hdr("Idempotency-Key", `"abc";p=1`)},
			"space in bare":      {hdr("Idempotency-Key", `a b`)},
			"alias malformed":    {hdr("X-Idempotency-Key", `"a,`)},
			"primary and alias":  {hdr("Idempotency-Key", `"a"`), hdr("X-Idempotency-Key", `"b"`)},
			"alias empty string": {hdr("X-Idempotency-Key", `""`)},
		} {
			rec := serve(f.h, newReq("POST", "/invoices", `{}`, opts...))
			if rec.Code != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400", name, rec.Code)
				continue
			}
			wantProblem(t, rec, http.StatusBadRequest, middleware.TypeInvalidKey)
		}
		wantCalls(t, f, 0)
	})

	t.Run("KeyForms", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		// One key in every accepted spelling: one execution.
		first := serve(f.h, newReq("POST", "/invoices", `{}`, hdr("Idempotency-Key", `"k-1:a/b"`)))
		wantStatus(t, first, http.StatusCreated)
		for _, opts := range [][]reqOpt{
			{hdr("Idempotency-Key", `k-1:a/b`)},
			{hdr("Idempotency-Key", ` "k-1:a/b" `)},
			{hdr("X-Idempotency-Key", `k-1:a/b`)},
			{hdr("Idempotency-Key", `"k-1:a/b"`), hdr("X-Idempotency-Key", `k-1:a/b`)},
		} {
			wantReplay(t, first, serve(f.h, newReq("POST", "/invoices", `{}`, opts...)))
		}
		// Escapes, and a key of exactly 255 characters, are keys too.
		wantStatus(t, serve(f.h, newReq("POST", "/invoices", `{}`, hdr("Idempotency-Key", `"a\"b\\c"`))), http.StatusCreated)
		wantStatus(t, serve(f.h, newReq("POST", "/invoices", `{}`, key(strings.Repeat("k", 255)))), http.StatusCreated)
		wantCalls(t, f, 3)
	})

	t.Run("PassThroughMethods", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{}, nil)
		for _, m := range []string{"GET", "HEAD", "OPTIONS", "PUT", "DELETE"} {
			for range 2 {
				rec := serve(f.h, newReq(m, "/a", ``, key("k")))
				wantStatus(t, rec, http.StatusCreated)
				if rec.Header().Get("Idempotent-Replayed") != "" {
					t.Fatalf("%s replayed", m)
				}
			}
			// No key needed either.
			wantStatus(t, serve(f.h, newReq(m, "/a", ``)), http.StatusCreated)
		}
		wantCalls(t, f, 15)
	})

	t.Run("MethodsOption", func(t *testing.T) {
		t.Parallel()
		f := setup(t, newStore, middleware.Options{Methods: []string{"PUT"}}, nil)
		serve(f.h, newReq("PUT", "/a", `{}`, key("k")))
		wantStatus(t, serve(f.h, newReq("PUT", "/a", `{}`, key("k"))), http.StatusCreated)
		serve(f.h, newReq("POST", "/a", `{}`))
		wantCalls(t, f, 2)
	})
}
