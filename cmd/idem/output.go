package main

// What the subcommands print with: JSON, times relative to now, sizes.

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func timeOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ago renders t with its distance from now: "2026-… (3m0s ago)".
func (c *cli) ago(t time.Time, what string) string {
	if t.IsZero() {
		return "none"
	}
	d := c.now().Sub(t).Round(time.Second)
	rel := d.String() + " ago"
	if d < 0 {
		rel = "in " + (-d).String()
	}
	if what != "" {
		rel = what + " " + rel
	}
	return fmt.Sprintf("%s (%s)", t.UTC().Format(time.RFC3339), rel)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB (%d bytes)", float64(n)/(1<<30), n)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB (%d bytes)", float64(n)/(1<<10), n)
	}
	return fmt.Sprintf("%d bytes", n)
}

// endpoint is what labels say of a request's endpoint: its route, with its
// method in front unless the route names it ("POST /payments/{id}"); empty
// when neither was recorded.
func endpoint(l idem.Labels) string {
	switch {
	case l.Method == "" || strings.HasPrefix(l.Route, l.Method+" "):
		return l.Route
	case l.Route == "":
		return l.Method
	}
	return l.Method + " " + l.Route
}
