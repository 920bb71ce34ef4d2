package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/identity"
	"github.com/idemkit/idem/pgstore"
)

// defaultKeysLimit is how many keys "idem keys" lists without --limit.
const defaultKeysLimit = 50

func (c *cli) keys(ctx context.Context, args []string) error {
	var (
		scope        optionalString
		state        string
		prefix       string
		storedPrefix string
		limit        int
		asJSON       bool
	)
	fs := c.subFlagSet("keys", "[--scope S] [--state S] [--prefix P | --stored-prefix P] [--limit N] [--json]",
		"Lists the most recently claimed keys, newest first: scope, key as stored, state (live or\n"+
			"abandoned claim, completed or expired result), age since claimed, and owner. The scope\n"+
			"is printed as --scope takes it (quoted for the shell when it needs to be), the key as\n"+
			"--stored-key takes it: paste both into \"idem inspect\" or \"idem forget\". It scans the table.")
	fs.Var(&scope, "scope", "list only the keys of this `scope`, as stored")
	fs.StringVar(&state, "state", "", "list only keys in this `state`: live, abandoned, completed or expired")
	fs.StringVar(&prefix, "prefix", "", "list only keys a client sent that start with `P` (Idempotency-Key: order-42 matches order-)")
	fs.StringVar(&storedPrefix, "stored-prefix", "", "list only keys whose stored form starts with `P` (call/conv-7/ for an MCP session's calls)")
	fs.IntVar(&limit, "limit", defaultKeysLimit, fmt.Sprintf("list at most `N` keys (1 to %d)", pgstore.MaxKeysLimit))
	fs.BoolVar(&asJSON, "json", false, "print JSON: an array of objects")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	filter := pgstore.KeyFilter{Limit: limit, KeyPrefix: storedPrefix}
	if scope.set {
		filter.Scope = &scope.value
	}
	if state != "" {
		var err error
		if filter.Status, err = pgstore.ParseKeyStatus(state); err != nil {
			return cmdUsagef(fs, "--state %q: want live, abandoned, completed or expired", state)
		}
	}
	switch {
	case prefix != "" && storedPrefix != "":
		return cmdUsagef(fs, "give at most one of --prefix and --stored-prefix")
	case prefix != "":
		k, err := idem.ParseKey(prefix)
		if err != nil {
			return cmdUsagef(fs, "--prefix %q: %s", prefix, keyReason(err))
		}
		filter.KeyPrefix = k.String()
	}
	if limit < 1 || limit > pgstore.MaxKeysLimit {
		return cmdUsagef(fs, "--limit %d: want 1 to %d", limit, pgstore.MaxKeysLimit)
	}
	s, closeStore, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	keys, err := s.Keys(ctx, filter)
	if err != nil {
		return c.tableError(err)
	}
	if asJSON {
		out := make([]map[string]any, len(keys))
		for i, k := range keys {
			out[i] = listedJSON(k)
		}
		return writeJSON(c.stdout, out)
	}
	if len(keys) == 0 {
		fmt.Fprintf(c.stdout, "no keys in table %s match\n", c.tableName())
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tKEY\tSTATE\tAGE\tOWNER")
	for _, k := range keys {
		age := c.now().Sub(k.Entry.CreatedAt).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", shellQuote(k.Scope), k.Key, k.Status, age, orDash(k.Entry.Owner))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(keys) == limit {
		fmt.Fprintf(c.stderr, "idem: keys: showed the %d most recent; --limit N shows more\n", limit)
	}
	return nil
}

// listedJSON is one object of keys --json.
func listedJSON(k pgstore.ListedKey) map[string]any {
	out := map[string]any{
		"scope":       k.Scope,
		"key":         k.Key.String(),
		"state":       string(k.Status),
		"generation":  k.Entry.Generation,
		"fingerprint": k.Entry.Fingerprint,
		"owner":       k.Entry.Owner,
		"created_at":  timeOrNil(k.Entry.CreatedAt),
	}
	switch k.Entry.State {
	case idem.StateClaimed:
		out["lease_end"] = timeOrNil(k.Entry.LeaseEnd)
	case idem.StateCompleted:
		out["completed_at"] = timeOrNil(k.Entry.CompletedAt)
		out["expires_at"] = timeOrNil(k.Entry.ExpiresAt)
	}
	return out
}

// shellQuote returns s as a POSIX shell word: as is when it holds only
// characters no shell treats specially, in single quotes when it is
// printable UTF-8, else in bash's $'…' with \xNN escapes.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@%+=,", r)))
	}) {
		return s
	}
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// optionalString is a string flag that knows whether it was given: an
// empty scope is a scope.
type optionalString struct {
	value string
	set   bool
}

func (o *optionalString) String() string { return o.value }
func (o *optionalString) Set(s string) error {
	o.value, o.set = s, true
	return nil
}

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
	fs.StringVar(&route, "route", "", "the `route`: the http.ServeMux pattern the request matched, as registered (\"POST /invoices\"), or the URL path when the middleware is not inside a ServeMux route")
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
