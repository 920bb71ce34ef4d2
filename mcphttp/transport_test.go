package mcphttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/mcphttp"
)

// headerLog records the headers each request to a test server carried.
type headerLog struct {
	mu   sync.Mutex
	seen []http.Header
}

func (l *headerLog) record(r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, r.Header.Clone())
}

func (l *headerLog) last(t *testing.T) http.Header {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seen) == 0 {
		t.Fatal("server not called")
	}
	return l.seen[len(l.seen)-1]
}

var forwarded = mcphttp.Meta{SessionID: "conv-1", IdempotencyKey: "key-1", Authorization: "Bearer caller-token", APIKey: "caller-key"}

// upstreamCall sends a POST to url over client with the caller's Meta in its
// context, as a tool handler does.
func upstreamCall(t *testing.T, client *http.Client, url string) {
	t.Helper()
	req, err := http.NewRequestWithContext(mcphttp.NewContext(t.Context(), forwarded), http.MethodPost, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func wantCredentials(t *testing.T, where string, h http.Header, want bool) {
	t.Helper()
	got := h.Get("Authorization") != "" || h.Get("X-Api-Key") != ""
	if got != want {
		t.Errorf("%s: Authorization %q, X-Api-Key %q; credentials wanted: %v", where, h.Get("Authorization"), h.Get("X-Api-Key"), want)
	}
	// The session and idempotency headers go wherever the caller sends
	// them: they are what lets any upstream dedupe the call.
	if h.Get("X-Session-Id") != "conv-1" || h.Get("X-Idempotency-Key") != "key-1" {
		t.Errorf("%s: X-Session-Id %q, X-Idempotency-Key %q, want both forwarded", where, h.Get("X-Session-Id"), h.Get("X-Idempotency-Key"))
	}
}

// TestTransportCredentialsOnlyToUpstreams: a tool forwards the caller's
// Authorization and X-Api-Key with the keys, only to its Upstreams: never
// to any host a tool (or a model choosing a URL) calls, and never again on
// a redirect to another host, after net/http stripped Authorization from
// it.
func TestTransportCredentialsOnlyToUpstreams(t *testing.T) {
	t.Parallel()
	var atA, atB headerLog
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { atB.record(r) }))
	t.Cleanup(b.Close)
	// B on another host name than A: localhost, where A is 127.0.0.1.
	bURL := strings.Replace(b.URL, "127.0.0.1", "localhost", 1)
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atA.record(r)
		switch r.URL.Path {
		case "/elsewhere":
			http.Redirect(w, r, bURL+"/landing", http.StatusFound)
		case "/here":
			http.Redirect(w, r, "/landing", http.StatusTemporaryRedirect)
		}
	}))
	t.Cleanup(a.Close)
	client := &http.Client{Transport: &mcphttp.Transport{Upstreams: []string{a.URL}}}

	upstreamCall(t, client, a.URL+"/direct")
	wantCredentials(t, "configured upstream A", atA.last(t), true)

	upstreamCall(t, client, a.URL+"/elsewhere")
	wantCredentials(t, "A's first hop", atA.last(t), true)
	wantCredentials(t, "B, after A redirected there", atB.last(t), false)

	upstreamCall(t, client, a.URL+"/here")
	wantCredentials(t, "A, after A redirected to itself", atA.last(t), true)

	upstreamCall(t, client, bURL+"/direct")
	wantCredentials(t, "B, not configured, called directly", atB.last(t), false)

	// A Transport without Upstreams forwards credentials nowhere.
	upstreamCall(t, &http.Client{Transport: &mcphttp.Transport{}}, a.URL+"/direct")
	wantCredentials(t, "A with no upstream configured", atA.last(t), false)
}

// TestTransportRedirectBackIsNotTrusted: A redirects to B, and B (which the
// service does not trust) sends the client back to A: the hop to A was
// chosen by B, so it carries no credentials.
func TestTransportRedirectBackIsNotTrusted(t *testing.T) {
	t.Parallel()
	var atA headerLog
	var aURL string
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, aURL+"/chosen-by-b", http.StatusFound)
	}))
	t.Cleanup(b.Close)
	bURL := strings.Replace(b.URL, "127.0.0.1", "localhost", 1)
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atA.record(r)
		if r.URL.Path == "/start" {
			http.Redirect(w, r, bURL, http.StatusFound)
		}
	}))
	t.Cleanup(a.Close)
	aURL = a.URL
	upstreamCall(t, &http.Client{Transport: &mcphttp.Transport{Upstreams: []string{a.URL}}}, a.URL+"/start")
	wantCredentials(t, "A, reached through B's redirect", atA.last(t), false)
}

// TestTransportBadUpstream: an Upstreams entry that is not an origin fails
// every request, before anything is sent.
func TestTransportBadUpstream(t *testing.T) {
	t.Parallel()
	var called headerLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called.record(r) }))
	t.Cleanup(srv.Close)
	for _, bad := range []string{"api.example.com", "ftp://api.example.com", "https://api.example.com/v1", "https://user@api.example.com", "https://"} {
		tr := &mcphttp.Transport{Upstreams: []string{bad}}
		req, _ := http.NewRequestWithContext(mcphttp.NewContext(t.Context(), forwarded), http.MethodGet, srv.URL, nil)
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
			t.Errorf("Upstreams %q: request sent, want an error", bad)
		}
	}
	if len(called.seen) != 0 {
		t.Errorf("%d requests reached the server", len(called.seen))
	}
}
