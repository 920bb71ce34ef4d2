package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idem"
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
		digest       string
	)
	fs := c.subFlagSet("keys", "[--scope S] [--state S] [--prefix P | --stored-prefix P] [--digest D] [--limit N] [--json]",
		"Lists the most recently claimed keys, newest first: scope, key as stored, digest, endpoint\n"+
			"(method and route) and caller that claimed it, state (live or abandoned claim, completed\n"+
			"or expired result), age since claimed, and owner. The scope is printed as --scope takes\n"+
			"it (quoted for the shell when it needs to be), the key as --stored-key takes it: paste\n"+
			"both into \"idem inspect\" or \"idem forget\". A key or endpoint longer than 32 characters\n"+
			"is cut short with …: --json prints it whole, and --digest finds it. It scans the table.")
	fs.Var(&scope, "scope", "list only the keys of this `scope`, as stored")
	fs.StringVar(&state, "state", "", "list only keys in this `state`: live, abandoned, completed or expired")
	fs.StringVar(&prefix, "prefix", "", "list only keys a client sent that start with `P` (Idempotency-Key: order-42 matches order-)")
	fs.StringVar(&storedPrefix, "stored-prefix", "", "list only keys whose stored form starts with `P` (call/conv-7/ for an MCP session's calls)")
	fs.StringVar(&digest, "digest", "", "list only the key with this `digest`, as log lines (key_digest) show it")
	fs.IntVar(&limit, "limit", defaultKeysLimit, fmt.Sprintf("list at most `N` keys (1 to %d)", pgstore.MaxKeysLimit))
	fs.BoolVar(&asJSON, "json", false, "print JSON: an array of objects")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if digest != "" && !idem.IsKeyDigest(digest) {
		return cmdUsagef(fs, "--digest %q: want the 16 hex digits of a key_digest", digest)
	}
	filter := pgstore.KeyFilter{Limit: limit, KeyPrefix: storedPrefix, Digest: digest}
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
		k, err := idem.ParseClientKey(prefix)
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
	fmt.Fprintln(tw, "SCOPE\tKEY\tDIGEST\tENDPOINT\tCALLER\tSTATE\tAGE\tOWNER")
	for _, k := range keys {
		age := c.now().Sub(k.Entry.CreatedAt).Round(time.Second)
		l := k.Entry.Labels
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shellQuote(k.Scope), cut(k.Key.String()), idem.KeyDigest(k.Scope, k.Key),
			cut(orDash(endpoint(l))), cut(orDash(l.Caller)), k.Status, age, orDash(k.Entry.Owner))
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
		"key_digest":  idem.KeyDigest(k.Scope, k.Key),
		"method":      k.Entry.Labels.Method,
		"route":       k.Entry.Labels.Route,
		"caller":      k.Entry.Labels.Caller,
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

// maxColumn is the most characters a column of "idem keys" shows of a
// key, an endpoint or a caller; --json shows them whole.
const maxColumn = 32

// cut returns s, or its first maxColumn-1 characters and an ellipsis when
// it is longer.
func cut(s string) string {
	if utf8.RuneCountInString(s) <= maxColumn {
		return s
	}
	r := []rune(s)
	return string(r[:maxColumn-1]) + "…"
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
