package main

import (
	"context"
	"fmt"
	"text/tabwriter"
)

func (c *cli) stats(ctx context.Context, args []string) error {
	var asJSON bool
	fs := c.subFlagSet("stats", "[--json]",
		"Counts the table's keys by state (live claims, abandoned claims, results, expired results),\n"+
			"shows the oldest live claim and the longest-abandoned one, and the table's size on disk.\n"+
			"An abandoned claim far in the past means no sweeper runs. It scans the whole table.")
	fs.BoolVar(&asJSON, "json", false, "print JSON, its keys named as the text's labels (live_claims, …, table_size_bytes)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	s, closeStore, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	st, err := s.Stats(ctx)
	if err != nil {
		return c.tableError(err)
	}
	if asJSON {
		return writeJSON(c.stdout, map[string]any{
			"table":                  c.tableName(),
			"live_claims":            st.Claimed,
			"abandoned_claims":       st.Abandoned,
			"results":                st.Completed,
			"expired_results":        st.Expired,
			"oldest_live_claim":      timeOrNil(st.OldestClaim),
			"oldest_abandoned_claim": timeOrNil(st.OldestAbandoned),
			"table_size_bytes":       st.TableBytes,
		})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s\n", c.tableName())
	fmt.Fprintf(tw, "live claims\t%d\n", st.Claimed)
	fmt.Fprintf(tw, "abandoned claims\t%d\t(lease ran out; released by the next sweep or taken over by a retry)\n", st.Abandoned)
	fmt.Fprintf(tw, "results\t%d\n", st.Completed)
	fmt.Fprintf(tw, "expired results\t%d\t(past retention; deleted by the next sweep)\n", st.Expired)
	fmt.Fprintf(tw, "oldest live claim\t%s\n", c.ago(st.OldestClaim, "claimed"))
	fmt.Fprintf(tw, "oldest abandoned claim\t%s\n", c.ago(st.OldestAbandoned, "lease ended"))
	fmt.Fprintf(tw, "table size\t%s\n", bytesText(st.TableBytes))
	return tw.Flush()
}
