package middleware_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

// keySourceHandler counts its runs behind a middleware reading keys with
// source.
func keySourceHandler(opts middleware.Options) (http.Handler, *int) {
	runs := 0
	return middleware.New(memstore.New(memstore.Options{}), opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		fmt.Fprintf(w, "run %d", runs)
	})), &runs
}

func postWith(h http.Handler, header http.Header) (*httptest.ResponseRecorder, string) {
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("{}"))
	for k, v := range header {
		r.Header[k] = v
	}
	w := serve(h, r)
	var p struct{ Type, Detail string }
	_ = json.Unmarshal(w.Body.Bytes(), &p)
	return w, p.Detail
}

func TestWebhookKey(t *testing.T) {
	t.Parallel()
	h, runs := keySourceHandler(middleware.Options{Key: middleware.WebhookKey})
	delivery := http.Header{"Webhook-Id": {"msg_1"}}
	for i := range 2 {
		w, _ := postWith(h, delivery)
		if w.Code != 200 || w.Body.String() != "run 1" || (i == 1) != (w.Header().Get("Idempotent-Replayed") == "true") {
			t.Fatalf("delivery %d: %d %q replayed=%q", i, w.Code, w.Body, w.Header().Get("Idempotent-Replayed"))
		}
	}
	if w, _ := postWith(h, http.Header{"Webhook-Id": {"msg_2"}}); w.Body.String() != "run 2" {
		t.Errorf("another message: %d %q", w.Code, w.Body)
	}
	// The Idempotency-Key header means nothing to this source.
	w, detail := postWith(h, http.Header{"Idempotency-Key": {"msg_1"}})
	if w.Code != 400 || detail != "POST requests must carry a webhook-id header, so that a retry does not run them twice." {
		t.Errorf("no webhook-id: %d %q", w.Code, detail)
	}
	w, detail = postWith(h, http.Header{"Webhook-Id": {"msg_1", "msg_2"}})
	if w.Code != 400 || detail != "webhook-id appears 2 times; it takes one key, not a list" {
		t.Errorf("two webhook-ids: %d %q", w.Code, detail)
	}
	w, detail = postWith(h, http.Header{"Webhook-Id": {"msg 1"}})
	if w.Code != 400 || detail != "webhook-id: byte 0x20 at offset 3 is not visible ASCII" {
		t.Errorf("a bad webhook-id: %d %q", w.Code, detail)
	}
	if *runs != 2 {
		t.Errorf("the handler ran %d times, want 2", *runs)
	}

	// KeyOptional lets a delivery without an id through, unprotected.
	h, runs = keySourceHandler(middleware.Options{Key: middleware.WebhookKey, KeyOptional: true})
	postWith(h, nil)
	postWith(h, nil)
	if *runs != 2 {
		t.Errorf("KeyOptional: the handler ran %d times, want 2", *runs)
	}
}

// TestDefaultKeySource: without Options.Key, Idempotency-Key (and its
// alias) as before, and the same 400 for a request without one.
func TestDefaultKeySource(t *testing.T) {
	t.Parallel()
	h, runs := keySourceHandler(middleware.Options{})
	postWith(h, http.Header{"Idempotency-Key": {"k"}})
	postWith(h, http.Header{"X-Idempotency-Key": {"k"}})
	if w, _ := postWith(h, http.Header{"Webhook-Id": {"k"}}); w.Code != 400 {
		t.Errorf("webhook-id with the default source: %d", w.Code)
	}
	_, detail := postWith(h, nil)
	if detail != "POST requests must carry an Idempotency-Key header, so that a retry does not run them twice." || *runs != 1 {
		t.Errorf("detail %q, runs %d", detail, *runs)
	}
}

// TestCustomKeySource: a source of the service's own; its errors are the
// 400's detail, and ErrNoKey is a missing key.
func TestCustomKeySource(t *testing.T) {
	t.Parallel()
	h, runs := keySourceHandler(middleware.Options{Key: func(r *http.Request) (idem.Key, error) {
		switch id := r.URL.Query().Get("delivery"); id {
		case "":
			return idem.Key{}, middleware.ErrNoKey
		case "bad":
			return idem.Key{}, errors.New("delivery ids are numbers")
		default:
			return idem.ParseClientKey(id)
		}
	}})
	post := func(query string) (*httptest.ResponseRecorder, string) {
		w := serve(h, httptest.NewRequest(http.MethodPost, "/hook"+query, strings.NewReader("{}")))
		var p struct{ Type, Detail string }
		_ = json.Unmarshal(w.Body.Bytes(), &p)
		return w, p.Detail
	}
	post("?delivery=7")
	if w, _ := post("?delivery=7"); w.Body.String() != "run 1" {
		t.Errorf("a retry: %q", w.Body)
	}
	if w, detail := post(""); w.Code != 400 || detail != "POST requests must carry an idempotency key, so that a retry does not run them twice." {
		t.Errorf("no key: %d %q", w.Code, detail)
	}
	if w, detail := post("?delivery=bad"); w.Code != 400 || detail != "delivery ids are numbers" {
		t.Errorf("bad key: %d %q", w.Code, detail)
	}
	if *runs != 1 {
		t.Errorf("runs %d", *runs)
	}
}

func TestKeyFromHeaderPanicsOnABadName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "webhook id", "a:b"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("KeyFromHeader(%q) did not panic", name)
				}
			}()
			middleware.KeyFromHeader(name)
		}()
	}
	if k, err := middleware.KeyFromHeader("svix-id")(&http.Request{Header: http.Header{"Svix-Id": {`"msg_1"`}}}); err != nil || k != mustParse(t, "msg_1") {
		t.Errorf("svix-id: %v, %v", k, err)
	}
}

func mustParse(t *testing.T, s string) idem.Key {
	t.Helper()
	k, err := idem.ParseClientKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
