package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/idemkit/idem"
)

func (c *cli) digest(ctx context.Context, args []string) error {
	var (
		kf             keyFlags
		route, caller  string
		routeSet, call bool
	)
	fs := c.subFlagSet("digest", "(--key K | --stored-key K) [--scope S | [--route R] [--caller C]]",
		"Prints the digest that log lines (key_digest), spans (idem.key.digest) and errors name a key\n"+
			"by. With --scope it computes it, without a database. Without, it finds the key's entries in\n"+
			"every scope (a scan of the table), or those of an endpoint (--route: \"POST /payments\",\n"+
			"\"/payments\" or an MCP tool) or caller (--caller: the principal), and prints each one's\n"+
			"digest, scope, endpoint, caller and state. \"idem inspect --digest D\" goes back.")
	kf.anyScope = true
	kf.register(fs)
	fs.Func("route", "only the entries claimed by a request to this `endpoint`", func(s string) error {
		route, routeSet = s, true
		return nil
	})
	fs.Func("caller", "only the entries claimed by this `caller` (the service's Principal)", func(s string) error {
		caller, call = s, true
		return nil
	})
	if err := kf.parse(fs, args); err != nil {
		return err
	}
	if kf.scopeSet {
		if routeSet || call {
			return cmdUsagef(fs, "--scope names one entry: --route and --caller select among a key's scopes without it")
		}
		fmt.Fprintln(c.stdout, idem.KeyDigest(kf.scope, kf.parsedKey))
		return nil
	}
	s, closeStore, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	listed, err := s.Keys(ctx, kf.filter())
	if err != nil {
		return c.tableError(err)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	n := 0
	for _, k := range listed {
		l := k.Entry.Labels
		if routeSet && !routeMatches(l, route) || call && l.Caller != caller {
			continue
		}
		if n == 0 {
			fmt.Fprintln(tw, "DIGEST\tSCOPE\tENDPOINT\tCALLER\tSTATE")
		}
		n++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", idem.KeyDigest(k.Scope, k.Key), shellQuote(k.Scope),
			orDash(endpoint(l)), orDash(l.Caller), k.Status)
	}
	if n == 0 {
		return kf.absent()
	}
	return tw.Flush()
}

// routeMatches reports whether an operator's --route names the endpoint of
// l: its route as recorded, the endpoint as idem prints it ("POST
// /payments"), or the endpoint's path without its method.
func routeMatches(l idem.Labels, route string) bool {
	ep := endpoint(l)
	return route == l.Route || route == ep || strings.HasSuffix(ep, " "+route)
}
