package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
)

// errAbsent: inspect found no entry; exit 1.
var errAbsent = errors.New("no such key")

func (c *cli) inspect(ctx context.Context, args []string) error {
	var (
		kf     keyFlags
		asJSON bool
	)
	fs := c.subFlagSet("inspect", "[--scope S] (--key K | --stored-key K | --digest D) [--json]",
		"Shows the entry of a key as stored: its digest, the endpoint and caller that claimed it,\n"+
			"and a claim (generation, owner, lease end; live or abandoned) or a recorded result\n"+
			"(status, headers, body, retention). Without --scope it shows the key's entries in every\n"+
			"scope, newest first (a scan of the table); --digest finds the key a log line names.\n"+
			"Exits 1 if absent.")
	kf.anyScope = true
	kf.register(fs)
	kf.registerDigest(fs)
	fs.BoolVar(&asJSON, "json", false, "print JSON: an object with --scope and --key or --stored-key, else an array")
	if err := kf.parse(fs, args); err != nil {
		return err
	}
	s, closeStore, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	if !kf.scopeSet || kf.digest != "" {
		return c.inspectAll(ctx, s, &kf, asJSON)
	}
	e, ok, err := s.Inspect(ctx, kf.scope, kf.parsedKey)
	if err != nil {
		return c.tableError(err)
	}
	if !ok {
		return kf.absent()
	}
	if asJSON {
		return writeJSON(c.stdout, entryJSON(kf.scope, kf.parsedKey, e, c.now()))
	}
	return c.printEntry(kf.scope, kf.parsedKey, e)
}

// inspectAll shows every entry kf selects, across scopes: those of a key,
// or the one of a digest.
func (c *cli) inspectAll(ctx context.Context, s *pgstore.Store, kf *keyFlags, asJSON bool) error {
	listed, err := s.Keys(ctx, kf.filter())
	if err != nil {
		return c.tableError(err)
	}
	type found struct {
		scope string
		key   idem.Key
		entry idem.Entry
	}
	var entries []found
	for _, l := range listed {
		e, ok, err := s.Inspect(ctx, l.Scope, l.Key)
		if err != nil {
			return c.tableError(err)
		}
		if ok { // else gone since the listing
			entries = append(entries, found{l.Scope, l.Key, e})
		}
	}
	if len(entries) == 0 {
		return kf.absent()
	}
	if asJSON {
		out := make([]map[string]any, len(entries))
		for i, f := range entries {
			out[i] = entryJSON(f.scope, f.key, f.entry, c.now())
		}
		return writeJSON(c.stdout, out)
	}
	if len(entries) > 1 {
		fmt.Fprintf(c.stdout, "key %q has %d entries, in %d scopes, newest first:\n", entries[0].key, len(entries), len(entries))
	}
	for _, f := range entries {
		if len(entries) > 1 {
			fmt.Fprintln(c.stdout)
		}
		if err := c.printEntry(f.scope, f.key, f.entry); err != nil {
			return err
		}
	}
	return nil
}

// entryJSON is inspect --json's object: the entry's fields, and for a claim
// whether its lease is live at now.
func entryJSON(scope string, key idem.Key, e idem.Entry, now time.Time) map[string]any {
	out := map[string]any{
		"scope":       scope,
		"key":         key.String(),
		"key_digest":  idem.KeyDigest(scope, key),
		"method":      e.Labels.Method,
		"route":       e.Labels.Route,
		"caller":      e.Labels.Caller,
		"state":       e.State.String(),
		"generation":  e.Generation,
		"fingerprint": e.Fingerprint,
		"owner":       e.Owner,
		"created_at":  timeOrNil(e.CreatedAt),
	}
	switch e.State {
	case idem.StateClaimed:
		out["lease_end"] = timeOrNil(e.LeaseEnd)
		out["live"] = now.Before(e.LeaseEnd)
	case idem.StateCompleted:
		out["completed_at"] = timeOrNil(e.CompletedAt)
		out["expires_at"] = timeOrNil(e.ExpiresAt)
		out["result"] = e.Result
	}
	return out
}

// printEntry is inspect's text: a table of the entry's fields, then a
// replayable result's headers and body as they would be replayed.
func (c *cli) printEntry(scope string, key idem.Key, e idem.Entry) error {
	now := c.now()
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "scope\t%s\n", shellQuote(scope))
	fmt.Fprintf(tw, "key\t%s\n", key)
	fmt.Fprintf(tw, "digest\t%s\n", idem.KeyDigest(scope, key))
	fmt.Fprintf(tw, "endpoint\t%s\n", orDash(endpoint(e.Labels)))
	fmt.Fprintf(tw, "caller\t%s\n", orDash(e.Labels.Caller))
	state := e.State.String()
	if e.State == idem.StateClaimed {
		if now.Before(e.LeaseEnd) {
			state += " (live)"
		} else {
			state += " (abandoned: lease ran out)"
		}
	}
	fmt.Fprintf(tw, "state\t%s\n", state)
	fmt.Fprintf(tw, "generation\t%d\n", e.Generation)
	fmt.Fprintf(tw, "owner\t%s\n", orDash(e.Owner))
	fmt.Fprintf(tw, "fingerprint\t%s\n", orDash(e.Fingerprint))
	fmt.Fprintf(tw, "claimed\t%s\n", c.ago(e.CreatedAt, ""))
	switch e.State {
	case idem.StateClaimed:
		fmt.Fprintf(tw, "lease end\t%s\n", c.ago(e.LeaseEnd, ""))
	case idem.StateCompleted:
		fmt.Fprintf(tw, "completed\t%s\n", c.ago(e.CompletedAt, ""))
		if e.ExpiresAt.IsZero() {
			fmt.Fprintf(tw, "expires\tnever\n")
		} else {
			fmt.Fprintf(tw, "expires\t%s\n", c.ago(e.ExpiresAt, ""))
		}
		r := e.Result
		if r.Unreplayable {
			fmt.Fprintf(tw, "result\tstatus %d, unreplayable (the response was too large to record)\n", r.Status)
			break
		}
		fmt.Fprintf(tw, "result\tstatus %d, %d body bytes\n", r.Status, len(r.Body))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if e.State != idem.StateCompleted || e.Result.Unreplayable {
		return nil
	}
	printResult(c.stdout, e.Result)
	return nil
}

// printResult prints a recorded result's headers, sorted by name, and body.
func printResult(w io.Writer, r idem.Result) {
	if len(r.Header) > 0 {
		fmt.Fprintln(w, "header:")
		for _, name := range slices.Sorted(maps.Keys(r.Header)) {
			for _, v := range r.Header[name] {
				fmt.Fprintf(w, "  %s: %s\n", name, v)
			}
		}
	}
	if len(r.Body) > 0 {
		fmt.Fprintf(w, "body:\n%s", r.Body)
		if !strings.HasSuffix(string(r.Body), "\n") {
			fmt.Fprintln(w)
		}
	}
}
