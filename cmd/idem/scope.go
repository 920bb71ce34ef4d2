package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/internal/identity"
)

// headerFlags is the repeatable -H 'Name: value'.
type headerFlags struct{ h http.Header }

func (f *headerFlags) String() string { return "" }

func (f *headerFlags) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return errors.New(`want "Name: value"`)
	}
	if f.h == nil {
		f.h = http.Header{}
	}
	f.h.Add(name, strings.TrimSpace(value))
	return nil
}

// defaultSecretEnv names the environment variable "idem scope" reads the
// scope secret from.
const defaultSecretEnv = "IDEM_SCOPE_SECRET"

func (c *cli) scope(ctx context.Context, args []string) error {
	var (
		headers   headerFlags
		method    string
		route     string
		mcp       bool
		session   string
		principal string
		cookies   optionalString
		secretEnv string
	)
	fs := c.subFlagSet("scope", "[-H 'Name: value']... (--route R [--method M] | --mcp) [--session S] [--principal P]",
		"Prints the scope the adapters give a request, for --scope: the middleware's default scope\n"+
			"(the caller's identity, X-Session-Id, method and route) or, with --mcp, mcphttp's (the\n"+
			"identity and _meta.sessionId). The identity is --principal when the service's Principal\n"+
			"returns one, else the credentials among the headers (Authorization, X-Api-Key and the\n"+
			"cookies named by --session-cookies). Give --session-cookies and --secret-env as the\n"+
			"service is configured, or the scope differs. The service's ScopeSecret is read from the\n"+
			"environment variable named by --secret-env, never from the command line. A service with\n"+
			"its own Options.Scope function computes its scopes itself: this does not apply.\n"+
			"\n"+
			"  idem inspect --scope \"$(idem scope -H 'Authorization: Bearer t0k3n' --route 'POST /invoices')\" --key order-42")
	fs.Var(&headers, "H", "a request header, `'Name: value'` (repeatable): Authorization, X-Api-Key, Cookie, X-Session-Id")
	fs.StringVar(&method, "method", http.MethodPost, "the request's `method`")
	fs.StringVar(&route, "route", "", "the `route`: the http.ServeMux pattern the request matched, as registered (\"POST /invoices\"), or the URL path as sent (escaped: /items/a%2Fb) when the middleware is not inside a ServeMux route")
	fs.BoolVar(&mcp, "mcp", false, "compute mcphttp's scope of a tools/call instead")
	fs.StringVar(&session, "session", "", "the `session`: the X-Session-Id header (HTTP) or _meta.sessionId (--mcp)")
	fs.StringVar(&principal, "principal", "", "the `principal` the service's Options.Principal returns for the caller (empty: none, the credentials are the identity)")
	fs.Var(&cookies, "session-cookies", "comma-separated `names`: the service's Options.SessionCookies, exactly, even for a request without cookies (they are part of the hashed identity; unset: not configured; empty: no cookie identifies a caller)")
	fs.StringVar(&secretEnv, "secret-env", defaultSecretEnv, "the environment `variable` holding the service's Options.ScopeSecret (unset or empty: no secret)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	switch {
	case mcp && route != "":
		return cmdUsagef(fs, "--route is for the HTTP middleware's scope; an MCP scope (--mcp) has none")
	case !mcp && route == "":
		return cmdUsagef(fs, "--route is required (the ServeMux pattern, such as 'POST /invoices'), or --mcp")
	case method == "":
		return cmdUsagef(fs, "--method is empty")
	}
	cfg := identity.Config{Secret: []byte(c.getenv(secretEnv))}
	if principal != "" {
		cfg.Principal = func(*http.Request) string { return principal }
	}
	if cookies.set {
		cfg.SessionCookies = []string{}
		for name := range strings.SplitSeq(cookies.value, ",") {
			if name = strings.TrimSpace(name); name != "" {
				cfg.SessionCookies = append(cfg.SessionCookies, name)
			}
		}
	}
	id, err := identity.New(cfg)
	if err != nil {
		return cmdUsagef(fs, "--session-cookies: %v", err)
	}
	r := httptest.NewRequestWithContext(ctx, method, "/", nil)
	for name, values := range headers.h {
		r.Header[name] = values
	}
	var scope string
	if mcp {
		scope, err = id.MCPScope(r, session)
	} else {
		if session != "" {
			r.Header.Set("X-Session-Id", session)
		}
		r.Pattern = route // a pattern or a URL path: the middleware hashes either as a string
		scope, err = id.HTTPScope(r)
	}
	if errors.Is(err, identity.ErrUnscopedCookies) {
		return fmt.Errorf("the request carries cookies but no credential, and --session-cookies is not given: name the service's session cookies (--session-cookies session), or --session-cookies '' if none identifies a caller")
	}
	if err != nil {
		return err
	}
	if len(cfg.Secret) == 0 {
		fmt.Fprintf(c.stderr, "idem: scope: $%s is not set: computed without a ScopeSecret (plain SHA-256), as for a service that sets none\n", secretEnv)
	}
	fmt.Fprintln(c.stdout, scope)
	return nil
}
