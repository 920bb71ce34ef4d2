package main

// The report: the table of every mode and the ratios the performance
// targets are stated in (the CSV is in csv.go).

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// ratioBase names the mode each mode is compared with first: the same
// database work without idem and without HTTP (floor, demo-floor), and,
// for replays, the same handler without idem (http-bare).
var ratioBase = map[string]string{
	modeStore:  modeFloor,
	modeUnique: modeFloor,
	modeMixed:  modeFloor,
	modeDemo:   modeDemoFloor,
	modeReplay: modeHTTPBare,

	modeCall:          modeCallBare,
	modeCallOnetx:     modeCallBare,
	modeCallReplay:    modeCallBare,
	modeGRPC:          modeGRPCBare,
	modeGRPCReplay:    modeGRPCBare,
	modeConnect:       modeConnectBare,
	modeConnectReplay: modeConnectBare,
}

// httpRatioBase names the second comparison: the same database work by
// hand behind the same HTTP server and client, without idem: what idem
// alone costs. demo (two commits) against http-demo-floor, demo-onetx and
// demo-onetx-sql (one) against http-onetx-floor.
var httpRatioBase = map[string]string{
	modeUnique:       modeHTTPFloor,
	modeMixed:        modeHTTPFloor,
	modeDemo:         modeHTTPDemoFloor,
	modeDemoOnetx:    modeHTTPOnetxFlr,
	modeDemoOnetxSQL: modeHTTPOnetxFlr,
}

// insertRatioBase names the third comparison, for the invoice modes: the
// invoice alone behind the same HTTP server, without idempotency
// (http-insert): what idempotency costs the service.
var insertRatioBase = map[string]string{
	modeHTTPDemoFloor: modeHTTPInsert,
	modeDemo:          modeHTTPInsert,
	modeHTTPOnetxFlr:  modeHTTPInsert,
	modeHTTPMinimum:   modeHTTPInsert,
	modeDemoOnetx:     modeHTTPInsert,
	modeDemoOnetxSQL:  modeHTTPInsert,
}

// ratio returns r's throughput as a share of the throughput of the mode
// base names, if that mode ran.
func ratio(byMode map[string]result, r result, base map[string]string) (float64, string, bool) {
	b, ok := byMode[base[r.mode]]
	if !ok || b.throughput() <= 0 {
		return 0, "", false
	}
	return r.throughput() / b.throughput(), b.mode, true
}

func printTable(w io.Writer, cfg config, results []result) {
	byMode := map[string]result{}
	for _, r := range results {
		byMode[r.mode] = r
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\trequests\terrors\treq/s\tp50\tp99\tallocs/req\tB/req\tratio\t\t\t")
	for _, r := range results {
		var cols [3]string
		for i, base := range []map[string]string{ratioBase, httpRatioBase, insertRatioBase} {
			if v, of, ok := ratio(byMode, r, base); ok {
				cols[i] = fmt.Sprintf("%.0f%% of %s", 100*v, of)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t\n",
			r.mode, r.ops, r.errors, r.throughput(), fmtDur(r.p50), fmtDur(r.p99), r.allocsPerOp, r.bytesPerOp, cols[0], cols[1], cols[2])
	}
	tw.Flush()
	if cfg.retryShare > 0 && slices.Contains(cfg.modes, modeMixed) {
		fmt.Fprintf(w, "mixed: retry share %.2f\n", cfg.retryShare)
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}
