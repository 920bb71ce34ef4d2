package robustness

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemkit/idem/integration/robustness/wire"
)

// opsBefore is how many operations (attempts) had begun by t: when a
// violation was in the history, in operations.
func opsBefore(h *history, t int64) int {
	n := 0
	for _, a := range h.attempts {
		if a.Start <= t {
			n++
		}
	}
	return n
}

func (h *history) begin() int64 {
	b := h.end
	for _, a := range h.attempts {
		b = min(b, a.Start)
	}
	return b
}

func (h *history) at(t int64) string {
	return fmt.Sprintf("+%.3fs", time.Duration(t-h.begin()).Seconds())
}

// summarize is the run's report, as printed.
func summarize(cfg runConfig, h *history, rep *report, st runStats) string {
	var b strings.Builder
	outcomes := map[string]int{}
	kinds := map[string]map[string]bool{}
	clientFaults := map[string]int{}
	logical := map[[2]int]bool{}
	elsewhere := 0
	last := map[[2]int]int{}
	for _, a := range h.attempts {
		outcomes[a.Outcome]++
		if kinds[a.Kind] == nil {
			kinds[a.Kind] = map[string]bool{}
		}
		kinds[a.Kind][a.Key] = true
		if a.Fault != "" {
			clientFaults[a.Fault]++
		}
		if a.probe() {
			clientFaults["other body"]++
		}
		lk := [2]int{a.Worker, a.Logical}
		if prev, ok := last[lk]; ok && prev != a.Instance {
			elsewhere++
		}
		last[lk] = a.Instance
		logical[lk] = true
	}
	clientFaults["retry at another instance"] = elsewhere
	faults := map[string]int{}
	var stalls int
	var longestStall time.Duration
	for _, f := range h.faults {
		if f.Kind == faultStall {
			stalls++
			longestStall = max(longestStall, f.For)
			continue
		}
		faults[f.Kind]++
	}
	nkeys := 0
	for _, ks := range kinds {
		nkeys += len(ks)
	}
	fmt.Fprintf(&b, "\nrobustness: seed %d, load %v (setup and settling not included; settled in %v)\n", cfg.seed, st.load.Round(time.Second), st.settle.Round(time.Second))
	fmt.Fprintf(&b, "  operations: %d attempts in %d logical requests, %d keys (%s), %d executions\n",
		len(h.attempts), len(logical), nkeys, countsOf(map[string]int{kindExt: len(kinds[kindExt]), kindDB: len(kinds[kindDB]), kindMCP: len(kinds[kindMCP]), kindTx: len(kinds[kindTx])}), len(rep.execs))
	fmt.Fprintf(&b, "  outcomes: %s\n", countsOf(outcomes))
	fmt.Fprintf(&b, "  client faults: %s\n", countsOf(clientFaults))
	fmt.Fprintf(&b, "  faults injected: %s\n", countsOf(faults))
	if stalls > 0 {
		fmt.Fprintf(&b, "  machine stalls (not injected; the harness's clock jumped %v or more): %d, the longest %v\n", stallThreshold, stalls, longestStall.Round(time.Millisecond))
	}
	fates := map[string]int{}
	for _, x := range rep.execs {
		fates[x.Fate]++
	}
	fmt.Fprintf(&b, "  executions by fate: %s\n", countsOf(fates))
	fence := map[string]int{}
	for _, r := range h.records {
		switch {
		case r.Ev == wire.EvStore && r.Op == "claim" && r.Takeover:
			fence["takeovers"]++
		case r.Ev == wire.EvStore && strings.HasPrefix(r.Err, "stale"):
			fence["stale "+r.Op+"s refused"]++
		case r.Ev == wire.EvSweep:
			fence["abandoned claims swept"] += r.Abandoned
		}
	}
	fmt.Fprintf(&b, "  claims: %s\n", countsOf(fence))
	fmt.Fprintf(&b, "  effects run again in a documented window, each explained by a fault: %s\n", countsOf(rep.windows))
	fmt.Fprintf(&b, "  anomalies: %d\n", len(rep.violations))
	for i, v := range rep.violations {
		if i == 20 {
			fmt.Fprintf(&b, "    ... and %d more\n", len(rep.violations)-20)
			break
		}
		fmt.Fprintf(&b, "    %s after %d operations: %s: key %s: %s\n", h.at(v.At), opsBefore(h, v.At), v.Kind, v.Key, v.Detail)
	}
	if len(rep.violations) > 0 {
		v := rep.violations[0]
		fmt.Fprintf(&b, "  first caught at %s, after %d of %d operations\n", h.at(v.At), opsBefore(h, v.At), len(h.attempts))
	}
	fmt.Fprintf(&b, "  rerun: %s\n", cfg.rerun())
	return b.String()
}

func countsOf(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// writeArtifacts writes, for the first keys with a violation, porcupine's
// visualization of the key's history (with the faults and the service's
// events as annotations) and the key's whole event sequence, and the
// summary and fault log; it returns the directory.
func writeArtifacts(cfg runConfig, h *history, rep *report, summary string) (string, error) {
	dir, err := filepath.Abs(cfg.artifacts)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var faults strings.Builder
	for _, f := range h.faults {
		fmt.Fprintf(&faults, "%s..%s %s %s %v %s\n", h.at(f.Begin), h.at(f.End), f.Kind, h.faultTarget(f), f.For, f.Err)
	}
	if err := os.WriteFile(filepath.Join(dir, "faults.txt"), []byte(faults.String()), 0o644); err != nil {
		return dir, err
	}
	var pg strings.Builder
	for _, p := range h.pgSamples {
		fmt.Fprintf(&pg, "%s %s\n", h.at(p.T), p.Text)
	}
	if err := os.WriteFile(filepath.Join(dir, "postgres.txt"), []byte(pg.String()), 0o644); err != nil {
		return dir, err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(summary), 0o644); err != nil {
		return dir, err
	}
	done := map[string]bool{}
	for _, v := range rep.violations {
		if v.Key == "" || done[v.Key] || len(done) == 10 {
			continue
		}
		done[v.Key] = true
		base := filepath.Join(dir, v.Key)
		if err := os.WriteFile(base+".events.txt", []byte(eventSequence(h, rep, v.Key)), 0o644); err != nil {
			return dir, err
		}
		info, ok := rep.linear[v.Key]
		if !ok {
			_, info = porcupine.CheckOperationsVerbose(model, operations(h, rep.byKey[v.Key], attemptExecs(rep)), time.Minute)
		}
		info.AddAnnotations(annotations(h, v.Key))
		if err := porcupine.VisualizePath(model, info, base+".html"); err != nil {
			return dir, err
		}
		fmt.Printf("robustness: key %s: %s.html (porcupine) and %s.events.txt\n", v.Key, base, base)
	}
	return dir, nil
}

func attemptExecs(rep *report) map[string]*execution {
	out := map[string]*execution{}
	for _, x := range rep.execs {
		out[x.Attempt] = x
	}
	return out
}

// annotations are a key's faults and server events, for the visualization.
func annotations(h *history, key string) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, f := range h.faults {
		out = append(out, porcupine.Annotation{Tag: "faults", Start: f.Begin, End: f.End,
			Description: f.Kind + " " + h.instName(f.Target), BackgroundColor: "#fde2e2"})
	}
	for _, r := range keyRecords(h, key) {
		out = append(out, porcupine.Annotation{Tag: r.Instance, Start: r.T, Description: describeRecord(r)})
	}
	return out
}

func keyRecords(h *history, key string) []wire.Record {
	var out []wire.Record
	for _, r := range h.records {
		if r.Key == key {
			out = append(out, r)
		}
	}
	return out
}

func describeRecord(r wire.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s pid %d %s", r.Instance, r.PID, r.Ev)
	for _, f := range []struct{ name, v string }{{"", r.Op}, {"", r.What}, {"attempt", r.Attempt}, {"exec", r.Exec}, {"variant", r.Variant}, {"adapter", r.Adapter}, {"err", r.Err}, {"", r.Msg}} {
		if f.v == "" {
			continue
		}
		if f.name != "" {
			fmt.Fprintf(&b, " %s=%s", f.name, f.v)
		} else {
			fmt.Fprintf(&b, " %s", f.v)
		}
	}
	if r.Gen != 0 {
		fmt.Fprintf(&b, " gen=%d", r.Gen)
	}
	if r.Code != 0 {
		fmt.Fprintf(&b, " code=%d", r.Code)
	}
	if r.Takeover {
		b.WriteString(" takeover")
	}
	if r.Cached {
		b.WriteString(" (replay cache)")
	}
	if r.Seq != 0 {
		fmt.Fprintf(&b, " seq=%d", r.Seq)
	}
	if r.LeaseEnd != 0 {
		fmt.Fprintf(&b, " lease_end=%+.3fs", time.Duration(r.LeaseEnd-r.T).Seconds())
	}
	if r.Sent != 0 {
		fmt.Fprintf(&b, " (sent %.1fms before)", float64(r.T-r.Sent)/1e6)
	}
	return b.String()
}

// eventSequence is everything the run recorded about key, in time order:
// the clients' attempts, the service's store calls, events and executions,
// the effects, the faults and the instances' starts and stops.
func eventSequence(h *history, rep *report, key string) string {
	type line struct {
		t int64
		s string
	}
	var lines []line
	first, last := h.end, int64(0)
	for _, a := range rep.byKey[key] {
		first, last = min(first, a.Start), max(last, a.End)
		fault := ""
		if a.Fault != "" {
			fault = " [" + a.Fault + "]"
		}
		lines = append(lines, line{a.Start, fmt.Sprintf("client  %s (logical %d, try %d) → %s %s body %s%s", a.ID, a.Logical, a.Try, h.instName(a.Instance), a.Kind, a.Variant, fault)})
		lines = append(lines, line{a.End, fmt.Sprintf("client  %s ← %s %d %s %s", a.ID, a.Outcome, a.Status, a.Exec, a.Detail)})
	}
	for _, r := range keyRecords(h, key) {
		first, last = min(first, r.T), max(last, r.T)
		lines = append(lines, line{r.T, "server  " + describeRecord(r)})
	}
	for _, e := range h.effects {
		if e.Key == key {
			lines = append(lines, line{e.T, fmt.Sprintf("effect  #%d by %s (attempt %s, %s, body %s)", e.Seq, e.Exec, e.Attempt, e.Instance, e.Variant)})
		}
	}
	for _, r := range h.dbRows {
		if r.Key == key {
			lines = append(lines, line{h.end, fmt.Sprintf("db      robust_effects row by %s gen %d body %s", r.Exec, r.Gen, r.Variant)})
		}
	}
	for _, f := range h.faults {
		if f.End >= first && f.Begin <= last {
			lines = append(lines, line{f.Begin, fmt.Sprintf("FAULT   %s %s begins (for %v) %s", f.Kind, h.faultTarget(f), f.For, f.Err)})
			lines = append(lines, line{f.End, fmt.Sprintf("FAULT   %s %s ends", f.Kind, h.faultTarget(f))})
		}
	}
	for _, r := range h.records {
		if (r.Ev == wire.EvLife || r.Ev == wire.EvSweep) && r.T >= first && r.T <= last {
			s := "server  " + describeRecord(r)
			if r.Ev == wire.EvSweep {
				s += fmt.Sprintf(" abandoned=%d expired=%d", r.Abandoned, r.Expired)
			}
			lines = append(lines, line{r.T, s})
		}
	}
	for _, p := range h.pgSamples {
		if p.T >= first && p.T <= last {
			lines = append(lines, line{p.T, "pg      " + p.Text})
		}
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].t < lines[j].t })
	var b strings.Builder
	fmt.Fprintf(&b, "key %s: recorded answer %q\n", key, h.recorded[key])
	for _, v := range rep.violations {
		if v.Key == key {
			fmt.Fprintf(&b, "VIOLATION %s: %s: %s\n", h.at(v.At), v.Kind, v.Detail)
		}
	}
	for _, l := range lines {
		fmt.Fprintf(&b, "%s  %s\n", h.at(l.t), l.s)
	}
	return b.String()
}
