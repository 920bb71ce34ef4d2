// Command testsummary reads `go test -json` on stdin and writes what a
// plain `go test` would (a line per package, the output of failed tests,
// build errors), then the skipped tests by reason, counted and named (the
// first few of each), so that a run where tests skipped for lack of a
// database cannot pass unnoticed, and a skip can be traced to its test. `make test` pipes every test run through it:
//
//	go test -json ./... | go run ./internal/testsummary
//
// It exits 1 when a test or a package failed, 0 otherwise.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
)

// event is the part of test2json's TestEvent that the summary reads.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	s := newSummary(os.Stdout)
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	s.finish()
	if s.failed {
		os.Exit(1)
	}
}

type summary struct {
	out     io.Writer
	pending map[string][]string // package + "\x00" + test: output not yet shown
	skips   map[string][]string // reason: the tests, as "pkg.TestName"
	failed  bool
}

func newSummary(out io.Writer) *summary {
	return &summary{out: out, pending: map[string][]string{}, skips: map[string][]string{}}
}

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (go vet's or the go command's own messages).
			fmt.Fprintln(s.out, string(line))
			continue
		}
		s.event(e)
	}
	return sc.Err()
}

func (s *summary) event(e event) {
	key := e.Package + "\x00" + e.Test
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.out, e.Output)
	case e.Action == "build-fail":
		s.failed = true
	case e.Test == "" && e.Action == "output":
		// The package's own lines: "ok pkg 1s", "FAIL", a panic.
		if e.Output != "PASS\n" {
			fmt.Fprint(s.out, e.Output)
		}
	case e.Test == "" && e.Action == "fail":
		s.failed = true
		// A panic or a timeout ends the binary mid-test: show what the
		// unfinished tests printed.
		for k, lines := range s.pending {
			if strings.HasPrefix(k, e.Package+"\x00") {
				fmt.Fprint(s.out, strings.Join(lines, ""))
				delete(s.pending, k)
			}
		}
	case e.Test == "":
		// A package's pass, or its skip: no test files.
	case e.Action == "output":
		s.pending[key] = append(s.pending[key], e.Output)
	case e.Action == "fail":
		s.failed = true
		fmt.Fprint(s.out, strings.Join(s.pending[key], ""))
		delete(s.pending, key)
	case e.Action == "skip":
		reason := skipReason(s.pending[key])
		s.skips[reason] = append(s.skips[reason], path.Base(e.Package)+"."+e.Test)
		delete(s.pending, key)
	case e.Action == "pass":
		delete(s.pending, key)
	}
}

var (
	framing  = regexp.MustCompile(`^\s*(=== (RUN|PAUSE|CONT|NAME)|--- (SKIP|PASS|FAIL))`)
	location = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)
)

// skipReason is the last line a skipped test logged (its t.Skip message)
// without the file:line prefix.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if framing.MatchString(l) || strings.TrimSpace(l) == "" {
			continue
		}
		l = strings.TrimSpace(location.ReplaceAllString(l, ""))
		if len(l) > 160 {
			l = l[:160] + "…"
		}
		return l
	}
	return "no reason given"
}

// namesPerReason is how many skipped tests a reason's line names.
const namesPerReason = 6

// finish writes the skipped tests, if any were: a line per reason, the
// most frequent first, with the count and the first names.
func (s *summary) finish() {
	total := 0
	reasons := make([]string, 0, len(s.skips))
	for r, names := range s.skips {
		total += len(names)
		reasons = append(reasons, r)
	}
	if total == 0 {
		return
	}
	sort.Slice(reasons, func(i, j int) bool {
		if ni, nj := len(s.skips[reasons[i]]), len(s.skips[reasons[j]]); ni != nj {
			return ni > nj
		}
		return reasons[i] < reasons[j]
	})
	fmt.Fprintf(s.out, "SKIPPED %d tests, by reason:\n", total)
	for _, r := range reasons {
		names := s.skips[r]
		sort.Strings(names)
		shown := strings.Join(names[:min(len(names), namesPerReason)], ", ")
		if more := len(names) - namesPerReason; more > 0 {
			shown += fmt.Sprintf(" and %d more", more)
		}
		fmt.Fprintf(s.out, "  %d × %s: %s\n", len(names), r, shown)
	}
}
