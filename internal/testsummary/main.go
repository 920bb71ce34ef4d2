// Command testsummary reads `go test -json` on stdin and writes what a
// plain `go test` would (a line per package, the output of failed tests,
// build errors), then one line that counts the skipped tests by reason, so
// that a run where most tests skipped for lack of a database cannot pass
// unnoticed. `make test` pipes every test run through it:
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
	skips   map[string]int      // reason: tests
	failed  bool
}

func newSummary(out io.Writer) *summary {
	return &summary{out: out, pending: map[string][]string{}, skips: map[string]int{}}
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
		s.skips[skipReason(s.pending[key])]++
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

// finish writes the one line about skipped tests, if any were.
func (s *summary) finish() {
	total := 0
	reasons := make([]string, 0, len(s.skips))
	for r, n := range s.skips {
		total += n
		reasons = append(reasons, r)
	}
	if total == 0 {
		return
	}
	sort.Slice(reasons, func(i, j int) bool {
		if s.skips[reasons[i]] != s.skips[reasons[j]] {
			return s.skips[reasons[i]] > s.skips[reasons[j]]
		}
		return reasons[i] < reasons[j]
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%d × %s", s.skips[r], r)
	}
	fmt.Fprintf(s.out, "SKIPPED %d tests: %s\n", total, strings.Join(parts, "; "))
}
