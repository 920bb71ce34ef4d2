package mcphttp

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// Transport is an http.RoundTripper for the upstream calls of a tool: it
// sets the headers of the [Meta] in the request's context (see
// [NewContext]) and leaves requests without one untouched.
//
//   - X-Session-Id and X-Idempotency-Key go on every request, wherever it
//     goes: they identify the call, and are what lets any upstream dedupe
//     it. The key is the one the wrapper bound to the caller
//     ([Meta.IdempotencyKey]), so it names one caller's call even at an
//     upstream that cannot tell callers apart.
//   - Authorization and X-Api-Key, the caller's credentials, go only to
//     the origins in Upstreams, and never on a redirect that crossed to
//     another origin: not to a host the tool (or a model choosing a URL)
//     calls that is not configured, not to a host a configured upstream
//     redirects to, and not back to a configured upstream from a hop that
//     another origin chose. On such a redirect the Transport also removes
//     credentials that net/http copied from the original request (it keeps
//     Authorization on a redirect to a subdomain, and X-Api-Key always).
//
// Headers the Transport sets overwrite the request's own.
//
// Forwarding the caller's token is what the MCP authorization
// specification calls token passthrough: an MCP server "MUST NOT pass
// through the token it received from the MCP client" to an upstream API,
// whose tokens are issued for it by its own authorization server
// (https://modelcontextprotocol.io/specification/2025-11-25/basic/authorization#access-token-privilege-restriction,
// https://modelcontextprotocol.io/specification/2025-11-25/basic/security_best_practices#token-passthrough).
// So configure Upstreams only with the resource the credentials were
// issued for: an API that shares the MCP server's audience (the same
// resource server, as in the demo), or one whose API keys the caller holds
// for it. A server that uses MCP's OAuth profile and calls APIs that are
// other resources leaves Upstreams empty and obtains its own token for
// each; the session and idempotency headers still go.
//
//	client := &http.Client{Transport: &mcphttp.Transport{Upstreams: []string{"https://api.example.com"}}}
//	// in a go-sdk tool handler:
//	ctx = mcphttp.NewContext(ctx, mcphttp.FromCallToolRequest(req))
//	upstream, _ := http.NewRequestWithContext(ctx, "POST", "https://api.example.com/invoices", body)
//	resp, err := client.Do(upstream)
type Transport struct {
	// Base sends the requests. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// Upstreams lists the origins that receive the caller's credentials:
	// a scheme (http or https), a host and an optional port, with no path
	// ("https://api.example.com", "http://127.0.0.1:8080"). Nil or empty
	// means no origin: credentials are never forwarded. An entry that is
	// not an origin makes every request fail, before anything is sent.
	Upstreams []string

	once    sync.Once
	origins map[string]bool
	err     error
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	t.once.Do(t.parseUpstreams)
	if t.err != nil {
		closeBody(req)
		return nil, t.err
	}
	m, ok := FromContext(req.Context())
	if !ok || m == (Meta{}) {
		return base.RoundTrip(req)
	}
	// A RoundTripper must not modify the caller's request.
	out := req.Clone(req.Context())
	m.SetHeaders(out.Header)
	switch {
	case crossedOrigins(req):
		out.Header.Del("Authorization")
		out.Header.Del(APIKeyHeader)
	case t.origins[origin(req.URL)]:
		m.SetCredentials(out.Header)
	}
	return base.RoundTrip(out)
}

func (t *Transport) parseUpstreams() {
	t.origins = make(map[string]bool, len(t.Upstreams))
	for i, s := range t.Upstreams {
		u, err := url.Parse(s)
		if err == nil && (u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Hostname() == "" ||
			u.User != nil || strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "") {
			err = fmt.Errorf("not an origin (scheme://host[:port])")
		}
		if err != nil {
			t.err = fmt.Errorf("mcphttp: Transport.Upstreams[%d] %q: %w", i, s, err)
			return
		}
		t.origins[origin(u)] = true
	}
}

// origin is u's scheme, host and port, normalized: lower case, the
// default port made explicit.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// crossedOrigins reports whether req is a redirect and some request of its
// chain had another origin: net/http sets Response on a redirected request,
// and Response.Request is the hop before it.
func crossedOrigins(req *http.Request) bool {
	to := origin(req.URL)
	for r := req; r.Response != nil && r.Response.Request != nil; {
		r = r.Response.Request
		if origin(r.URL) != to {
			return true
		}
	}
	return false
}

// closeBody closes a request body that will not be sent, as a
// RoundTripper must even on error.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
