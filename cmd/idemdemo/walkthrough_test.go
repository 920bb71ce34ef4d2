package main

// TestWalkthrough runs every console block of docs/demo.md and
// docs/operations.md, in order, against fresh demos, and compares what each
// command prints with what the page says it prints. A page that drifts from
// the product fails it, and so does a page edited without running its
// commands.
//
// # Running a page
//
// The commands run in one bash session per page (so SID=…, arrays and
// TIMEFORMAT carry over, as in a terminal), with stdout and stderr merged.
// A command running in the background (a line ending in &) is waited for
// before the next block runs (after its directive: a kill ends such a
// request). An HTML comment right before a block says what the block
// needs:
//
//	<!-- walkthrough: start [NAME=value…] [-flag…] -->
//	    the block shows a demo starting: its commands are the reader's
//	    (make demo, go run, docker compose, export) and are not run; the
//	    test starts a fresh demo with the environment and flags given and
//	    compares its start-up output with the block's.
//	<!-- walkthrough: fresh demo [NAME=value…] [-flag…] -->
//	    a fresh demo is started first (its start-up output is not shown);
//	    then the block runs.
//	<!-- walkthrough: restart -->
//	    the running demo is stopped (SIGINT, as Ctrl-C) and started again
//	    with the same configuration and database; then the block runs.
//	<!-- walkthrough: kill -->
//	    the running demo is killed (SIGKILL, as a crash) and not started
//	    again: what it left in the database stays (a claim in flight);
//	    then the block runs, with the CLI.
//	<!-- walkthrough: spans -->
//	    before a ```json block: each of its lines is one of the last spans
//	    the running demo printed (OTEL_TRACES_EXPORTER=console), in order,
//	    abridged: the span's name and every attribute the line shows must
//	    be the printed span's, and span ids the line shows must relate the
//	    printed spans as they relate the lines (a parent's id is its
//	    child's Parent). -update does not rewrite these blocks.
//
// NAME=value puts a variable in the demo's environment; DATABASE_URL with
// no value means a fresh PostgreSQL schema of the tests' database, which
// the session's DATABASE_URL names too (for the CLI).
//
// # Normalisations
//
// Output is compared line by line after these, and only these, rewrites of
// both sides (norm and session.rewrite):
//
//   - a Date header's value, a log line's time=, and bash's "took N.NNs"
//     (the page's TIMEFORMAT) become placeholders: they differ at every
//     run;
//   - the demo's port: the page says 127.0.0.1:8080 (or localhost:8080),
//     the test's demo listens on a free port;
//   - an MCP session id: the page's (Mcp-Session-Id: in an output, and
//     wherever the page repeats it) stands for the one the demo issued;
//   - a log line's host=, port= and database= name the tests' database
//     server (a container's port, or TEST_DATABASE_URL's), not the page's;
//   - the page's DATABASE_URL (the one a start block exports) stands for
//     the test's, in commands;
//   - go run ./cmd/idem runs the CLI built from this checkout;
//   - the idem CLI's times, absolute and relative ("2026-12-01T19:44:39Z
//     (10s ago)", "(lease ended 4s ago)", a bare time in a column, the
//     age of a key idem keys lists), and the demo's owner name (its host
//     and pid);
//   - line ends (curl -i prints CRLF) and trailing blank lines.
//
// The session's PATH starts with the CLI built from this checkout, so a
// page may call it idem, as an operator does.
//
// go test -run TestWalkthrough -update writes what the demo printed into
// the pages instead (real dates and all, the port and session id as the
// page had them): for a change that alters the demo's answers on purpose.
// Read the diff before committing it.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/internal/testlog"
)

var updatePages = flag.Bool("update", false, "TestWalkthrough: write what the demo printed into docs/demo.md and docs/operations.md")

func TestWalkthrough(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "idem"), "../idem").CombinedOutput(); err != nil {
		t.Fatalf("building the CLI: %v\n%s", err, out)
	}
	for _, page := range []struct{ file, section string }{
		{"../../docs/demo.md", ""},
		{"../../docs/operations.md", ""},
	} {
		t.Run(filepath.Base(page.file), func(t *testing.T) {
			blocks, err := consoleBlocks(page.file, page.section)
			if err != nil {
				t.Fatal(err)
			}
			if len(blocks) == 0 {
				t.Fatalf("%s %s has no console block", page.file, page.section)
			}
			s := newSession(t, bin)
			for _, b := range blocks {
				if t.Failed() && !*updatePages {
					return // later blocks depend on earlier ones
				}
				s.run(b)
			}
			s.exec("wait")
			if *updatePages {
				s.writePage(page.file)
			}
		})
	}
}

// block is one console block of a page.
type block struct {
	file      string
	line      int    // of the opening fence
	directive string // the walkthrough comment before it, without "walkthrough:"
	steps     []step
	spans     []string // a spans block's lines (then steps is empty)
}

// step is one command of a block and the output the page shows for it.
type step struct {
	line    int // of the command
	cmdEnd  int // the command's last line
	cmd     string
	want    []string
	wantEnd int // the last line of want (cmdEnd when there is none)
}

var directiveRE = regexp.MustCompile(`^<!-- walkthrough: (.*) -->$`)

// consoleBlocks reads the ```console blocks of file (of its section under
// the heading section alone, up to the next heading of its level or
// higher, when section is not empty), and the ```json blocks
// whose directive is "spans".
func consoleBlocks(file, section string) ([]block, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var blocks []block
	var cur *block
	prev := "" // the last non-blank line before a fence
	inSection := section == ""
	level := strings.Index(section, " ") // the heading's #s
	fenced := false                      // in a fenced block, where # starts no heading
	for i, line := range strings.Split(string(src), "\n") {
		n := i + 1
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if section != "" && !fenced && strings.HasPrefix(line, "#") {
			if line == section {
				inSection = true
			} else if inSection && strings.Index(line, " ") <= level {
				inSection = false
			}
		}
		if !inSection {
			continue
		}
		if cur == nil {
			m := directiveRE.FindStringSubmatch(prev)
			switch fence := strings.TrimSpace(line); {
			case fence == "```console":
				cur = &block{file: file, line: n}
				if m != nil {
					cur.directive = m[1]
				}
			case fence == "```json" && m != nil && m[1] == "spans":
				cur = &block{file: file, line: n, directive: m[1], spans: []string{}}
			}
			if strings.TrimSpace(line) != "" {
				prev = strings.TrimSpace(line)
			}
			continue
		}
		if strings.TrimSpace(line) == "```" {
			blocks = append(blocks, *cur)
			cur, prev = nil, ""
			continue
		}
		if cur.spans != nil {
			cur.spans = append(cur.spans, line)
			continue
		}
		switch {
		case strings.HasPrefix(line, "$ "):
			cur.steps = append(cur.steps, step{line: n, cmdEnd: n, wantEnd: n, cmd: strings.TrimPrefix(line, "$ ")})
		case len(cur.steps) == 0:
			return nil, fmt.Errorf("%s:%d: output before the first command", file, n)
		default:
			st := &cur.steps[len(cur.steps)-1]
			// An indented line right after a command continues it (a
			// trailing backslash, an open array, a loop's body).
			if len(st.want) == 0 && (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")) {
				st.cmd += "\n" + line
				st.cmdEnd, st.wantEnd = n, n
				continue
			}
			st.want = append(st.want, line)
			st.wantEnd = n
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a console block that does not end", file, cur.line)
	}
	return blocks, nil
}

// session is a page being run: its bash and its demo.
type session struct {
	t   *testing.T
	bin string // holds the idem CLI

	bash  *exec.Cmd
	stdin io.WriteCloser
	out   testlog.Buffer
	marks int

	// edits are the outputs -update writes into the page.
	edits []edit

	demo    *walkDemo
	dbURL   string
	dbDoc   string // the page's DATABASE_URL, which stands for dbURL
	port    string
	sidDoc  string // the page's MCP session id
	sidReal string // the demo's
}

func newSession(t *testing.T, bin string) *session {
	s := &session{t: t, bin: bin}
	s.bash = exec.Command("bash", "--noprofile", "--norc")
	s.bash.Dir = t.TempDir()
	s.bash.Env = []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + s.bash.Dir, "LC_ALL=C", "TERM=dumb"}
	s.bash.Stdout, s.bash.Stderr = &s.out, &s.out
	var err error
	if s.stdin, err = s.bash.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.bash.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The demo first: a background request to it (a page that failed
		// before its wait) would keep bash's output open.
		if s.demo != nil {
			s.demo.stop(t)
		}
		_ = s.stdin.Close()
		if err := s.bash.Wait(); err != nil {
			t.Errorf("bash: %v", err)
		}
	})
	return s
}

// run runs one block.
func (s *session) run(b block) {
	t := s.t
	fields := strings.Fields(b.directive)
	if b.directive != "kill" {
		s.exec("wait") // the previous block's background commands
	}
	for _, st := range b.steps {
		if m := exportDatabaseURLRE.FindStringSubmatch(st.cmd); m != nil {
			s.dbDoc = m[1]
		}
	}
	switch {
	case b.directive == "":
	case b.directive == "kill":
		if s.demo == nil {
			t.Fatalf("%s:%d: kill with no demo running", b.file, b.line)
		}
		s.demo.kill(t)
		s.exec("wait") // the previous block's background commands, cut off
	case b.directive == "spans":
		if s.demo == nil {
			t.Fatalf("%s:%d: spans with no demo running", b.file, b.line)
		}
		s.checkSpans(b)
		return
	case b.directive == "restart":
		if s.demo == nil {
			t.Fatalf("%s:%d: restart with no demo running", b.file, b.line)
		}
		s.startDemo(s.demo.cfg)
	case len(fields) >= 1 && fields[0] == "start":
		s.startDemo(s.config(fields[1:]))
		last := b.steps[len(b.steps)-1]
		s.compare(b.file, last.line, "the demo's start-up", s.demo.startup, flatten(b.steps))
		for _, st := range b.steps[:len(b.steps)-1] {
			s.edits = append(s.edits, edit{from: st.cmdEnd + 1, to: st.wantEnd})
		}
		s.edits = append(s.edits, edit{from: last.cmdEnd + 1, to: last.wantEnd, lines: s.pageLines(s.demo.startup, flatten(b.steps))})
		return
	case len(fields) >= 2 && fields[0] == "fresh" && fields[1] == "demo":
		s.startDemo(s.config(fields[2:]))
	default:
		t.Fatalf("%s:%d: unknown directive %q", b.file, b.line, b.directive)
	}
	if s.demo == nil {
		t.Fatalf("%s:%d: no demo runs: give the block a walkthrough directive", b.file, b.line)
	}
	for _, st := range b.steps {
		if testing.Verbose() {
			s.t.Logf("%s:%d: $ %s", filepath.Base(b.file), st.line, strings.SplitN(st.cmd, "\n", 2)[0])
		}
		got := s.exec(s.rewriteCommand(st.cmd))
		s.learnSession(st.want, got)
		s.compare(b.file, st.line, "$ "+strings.SplitN(st.cmd, "\n", 2)[0], got, st.want)
		s.edits = append(s.edits, edit{from: st.cmdEnd + 1, to: st.wantEnd, lines: s.pageLines(got, st.want)})
	}
}

// walkDemo is a demo process of the walkthrough, its stdout and stderr
// merged as on a terminal.
type walkDemo struct {
	cfg     demoConfig
	cmd     *exec.Cmd
	out     testlog.Buffer
	done    chan struct{} // closed when it exited
	startup string        // its output when it started listening
}

type demoConfig struct {
	env   []string
	flags []string
}

// config reads a directive's NAME=value and -flag words.
func (s *session) config(words []string) demoConfig {
	var c demoConfig
	for _, w := range words {
		switch {
		case w == "DATABASE_URL":
			if s.dbURL == "" {
				s.dbURL = testdb.SchemaURL(s.t, testdb.Schema(s.t))
			}
			c.env = append(c.env, "DATABASE_URL="+s.dbURL)
		case strings.HasPrefix(w, "-"):
			c.flags = append(c.flags, w)
		case strings.Contains(w, "="):
			c.env = append(c.env, w)
		default:
			s.t.Fatalf("walkthrough directive: %q is neither NAME=value nor a -flag", w)
		}
	}
	return c
}

func (s *session) startDemo(cfg demoConfig) {
	t := s.t
	if s.demo != nil {
		s.demo.stop(t)
	}
	if s.port == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, s.port, _ = net.SplitHostPort(ln.Addr().String())
		ln.Close()
	}
	d := &walkDemo{cfg: cfg, done: make(chan struct{})}
	d.cmd = exec.Command(demoBinary, append([]string{"-addr", "127.0.0.1:" + s.port}, cfg.flags...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "IDEMDEMO_") && !strings.HasPrefix(kv, "OTEL_") {
			d.cmd.Env = append(d.cmd.Env, kv)
		}
	}
	d.cmd.Env = append(d.cmd.Env, cfg.env...)
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.done)
	}()
	s.demo = d
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		out := d.out.String()
		if i := strings.Index(out, "idemdemo listening on "); i >= 0 && strings.Contains(out[i:], "\n") {
			d.startup = out
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not listen within a minute:\n%s", out)
		}
	}
	dbURL := ""
	for _, kv := range cfg.env {
		if v, ok := strings.CutPrefix(kv, "DATABASE_URL="); ok {
			dbURL = v
		}
	}
	if dbURL != "" {
		s.exec("export DATABASE_URL='" + dbURL + "'")
	} else {
		s.exec("unset DATABASE_URL")
	}
}

// stop stops the demo as Ctrl-C does, and waits for it. A demo that
// exited already is left as it is.
func (d *walkDemo) stop(t *testing.T) {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("the demo did not stop within a minute of SIGINT:\n%s", d.out.String())
	}
}

// kill kills the demo as a crash does (SIGKILL), and waits for it to be
// gone. A demo that exited already is left as it is.
func (d *walkDemo) kill(t *testing.T) {
	select {
	case <-d.done:
		return
	default:
	}
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.done
}

// exec runs cmd in the session's bash and returns what it printed.
func (s *session) exec(cmd string) string {
	s.marks++
	mark := fmt.Sprintf("__walkthrough_%d__", s.marks)
	start := len(s.out.String())
	if _, err := fmt.Fprintf(s.stdin, "%s\nprintf '\\n%s\\n'\n", cmd, mark); err != nil {
		s.t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		out := s.out.String()[start:]
		if i := strings.Index(out, "\n"+mark+"\n"); i >= 0 {
			return out[:i]
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%q did not finish within two minutes; it printed:\n%s", cmd, out)
		}
	}
}

// rewriteCommand points a command of the page at this test's demo, CLI and
// MCP session.
func (s *session) rewriteCommand(cmd string) string {
	if s.dbDoc != "" && s.dbURL != "" {
		cmd = strings.ReplaceAll(cmd, s.dbDoc, s.dbURL)
	}
	cmd = strings.NewReplacer("127.0.0.1:8080", "127.0.0.1:"+s.port, "localhost:8080", "127.0.0.1:"+s.port,
		"go run ./cmd/idem ", s.bin+"/idem ").Replace(cmd)
	if s.sidDoc != "" {
		cmd = strings.ReplaceAll(cmd, s.sidDoc, s.sidReal)
	}
	return cmd
}

var (
	sessionIDRE         = regexp.MustCompile(`(?m)^Mcp-Session-Id: (\S+)`)
	exportDatabaseURLRE = regexp.MustCompile(`^export DATABASE_URL='([^']+)'`)
)

// learnSession pairs the page's MCP session id with the demo's.
func (s *session) learnSession(want []string, got string) {
	doc := sessionIDRE.FindStringSubmatch(strings.Join(want, "\n"))
	real := sessionIDRE.FindStringSubmatch(strings.ReplaceAll(got, "\r", ""))
	if doc != nil && real != nil {
		s.sidDoc, s.sidReal = doc[1], real[1]
	}
}

var norms = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`^Date: .*$`), "Date: <date>"},
	{regexp.MustCompile(`\btime=\d{4}-\d\d-\d\dT\S+`), "time=<time>"},
	{regexp.MustCompile(`^took \d+\.\d+s$`), "took <seconds>s"},
	{regexp.MustCompile(`\bhost=\S+ port=\d+ database=\S+`), "host=<host> port=<port> database=<database>"},
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(([a-z ]+ )?(\S+ ago|in \S+)\)`), "<time> (${1}<when>)"},
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b`), "<time>"},
	{regexp.MustCompile(`\b\d+(?:m\d+)?s\s+(idemdemo@)`), "<age> $1"}, // idem keys' AGE, before its OWNER
	{regexp.MustCompile(`\bidemdemo@\S+ pid \d+\b`), "idemdemo@<host> pid <pid>"},
}

func norm(line string) string {
	line = strings.TrimRight(line, "\r \t")
	for _, n := range norms {
		line = n.re.ReplaceAllString(line, n.repl)
	}
	return line
}

// asPage is got as the page would show it: LF line ends, the page's port
// and session id, no blank lines around it.
func (s *session) asPage(got string) []string {
	got = strings.ReplaceAll(got, "127.0.0.1:"+s.port, "127.0.0.1:8080")
	if s.sidReal != "" {
		got = strings.ReplaceAll(got, s.sidReal, s.sidDoc)
	}
	return trimBlank(strings.Split(strings.ReplaceAll(got, "\r\n", "\n"), "\n"))
}

// pageLines is what -update writes for a command that printed got where
// the page had want: got, and a blank line after it if want had one.
func (s *session) pageLines(got string, want []string) []string {
	lines := s.asPage(got)
	if n := len(want); n > 0 && strings.TrimSpace(want[n-1]) == "" && len(lines) > 0 {
		lines = append(lines, "")
	}
	if lines == nil {
		lines = []string{}
	}
	return lines
}

// edit replaces the lines from..to (1-based, inclusive; to = from-1 for an
// insertion) of a page with lines; nil lines deletes them.
type edit struct {
	from, to int
	lines    []string
}

// writePage applies the session's edits to page.
func (s *session) writePage(page string) {
	src, err := os.ReadFile(page)
	if err != nil {
		s.t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	for i := len(s.edits) - 1; i >= 0; i-- {
		e := s.edits[i]
		lines = append(lines[:e.from-1], append(append([]string(nil), e.lines...), lines[e.to:]...)...)
	}
	if err := os.WriteFile(page, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("wrote %s: read the diff", page)
}

// compare fails the test, naming the page's line, unless got is want.
func (s *session) compare(file string, line int, what, got string, want []string) {
	s.t.Helper()
	if *updatePages {
		return
	}
	g := s.asPage(got)
	w := trimBlank(want)
	var diff bytes.Buffer
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = norm(g[i])
		}
		if i < len(w) {
			wl = norm(w[i])
		}
		if gl != wl && diff.Len() == 0 {
			fmt.Fprintf(&diff, "first difference at output line %d:\n  page: %q\n  demo: %q\n", i+1, wl, gl)
		}
	}
	if diff.Len() > 0 {
		s.t.Errorf("%s:%d: %s printed something else than the page says.\n%s--- the demo printed:\n%s\n--- the page says:\n%s",
			file, line, what, diff.String(), strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}

// trimBlank drops the blank lines at the end (and the start) of lines.
func trimBlank(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	return lines
}

// flatten is a start block's output: every step's, in order.
func flatten(steps []step) []string {
	var out []string
	for _, st := range steps {
		out = append(out, st.want...)
	}
	return out
}

// printedSpan is what checkSpans reads of a span the demo printed.
type printedSpan struct {
	Name        string
	SpanContext struct{ SpanID string }
	Parent      struct{ SpanID string }
	Attributes  []struct {
		Key   string
		Value json.RawMessage
	}
}

var (
	spanNameRE   = regexp.MustCompile(`^\{"Name":"([^"]+)"`)
	spanAttrRE   = regexp.MustCompile(`\{"Key":"([^"]+)","Value":(\{"Type":"[A-Z0-9]+","Value":(?:"[^"]*"|[^{}"]*)\})\}`)
	spanIDRE     = regexp.MustCompile(`"SpanContext":\{"SpanID":"([0-9a-f]+)"`)
	spanParentRE = regexp.MustCompile(`"Parent":\{"SpanID":"([0-9a-f]+)"`)
)

// checkSpans compares a spans block with the last spans the running demo
// printed (see the package doc).
func (s *session) checkSpans(b block) {
	t := s.t
	var lines []string
	var lineNo []int // of each of lines, in the page
	for i, l := range b.spans {
		if strings.TrimSpace(l) != "" {
			lines, lineNo = append(lines, l), append(lineNo, b.line+1+i)
		}
	}
	// The spans of the page's last request are printed before its answer
	// is sent, but read from the demo's pipe a moment later: wait until
	// the last ones printed are named as the page's lines are.
	var printed []printedSpan
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		printed = s.printedSpans(b)
		if len(printed) >= len(lines) {
			printed = printed[len(printed)-len(lines):]
			if spanNames(printed) == spanNames(nil, lines...) || time.Now().After(deadline) {
				break
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("%s:%d: the page shows %d spans, the demo printed %d", b.file, b.line, len(lines), len(printed))
		}
	}
	ids := map[string]string{} // the page's span id: the demo's
	sameID := func(line int, doc, real string) {
		if doc == "" {
			return
		}
		if prev, ok := ids[doc]; ok && prev != real {
			t.Errorf("%s:%d: span id %s stands for two spans the demo printed (%s, %s)", b.file, line, doc, prev, real)
		}
		ids[doc] = real
	}
	for i, l := range lines {
		line, sp := lineNo[i], printed[i]
		m := spanNameRE.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("%s:%d: a span line without its \"Name\" first: %s", b.file, line, l)
			continue
		}
		if m[1] != sp.Name {
			t.Errorf("%s:%d: the page shows span %q where the demo printed %q", b.file, line, m[1], sp.Name)
			continue
		}
		attrs := map[string]string{}
		for _, a := range sp.Attributes {
			attrs[a.Key] = compactJSON(a.Value)
		}
		for _, a := range spanAttrRE.FindAllStringSubmatch(l, -1) {
			if got, ok := attrs[a[1]]; !ok {
				t.Errorf("%s:%d: span %s: the page shows attribute %s, which the demo did not print", b.file, line, sp.Name, a[1])
			} else if want := compactJSON([]byte(a[2])); got != want {
				t.Errorf("%s:%d: span %s: attribute %s is %s on the page, %s in the demo's output", b.file, line, sp.Name, a[1], want, got)
			}
		}
		if m := spanIDRE.FindStringSubmatch(l); m != nil {
			sameID(line, m[1], sp.SpanContext.SpanID)
		}
		if m := spanParentRE.FindStringSubmatch(l); m != nil {
			sameID(line, m[1], sp.Parent.SpanID)
		}
	}
}

// compactJSON is v without insignificant space, for comparing.
func compactJSON(v []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return string(v)
	}
	return b.String()
}

// printedSpans reads the spans the running demo has printed so far.
func (s *session) printedSpans(b block) []printedSpan {
	out := s.demo.out.String()
	out = out[:strings.LastIndex(out, "\n")+1] // whole lines only
	var printed []printedSpan
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue // the demo's log and listening lines
		}
		var sp printedSpan
		if err := json.Unmarshal([]byte(l), &sp); err != nil {
			s.t.Fatalf("%s:%d: the demo printed a line that is not a span: %v\n%s", b.file, b.line, err, l)
		}
		printed = append(printed, sp)
	}
	return printed
}

// spanNames lists the names of spans, and those the page's lines start
// with.
func spanNames(spans []printedSpan, lines ...string) string {
	var names []string
	for _, sp := range spans {
		names = append(names, sp.Name)
	}
	for _, l := range lines {
		if m := spanNameRE.FindStringSubmatch(l); m != nil {
			names = append(names, m[1])
		}
	}
	return strings.Join(names, ", ")
}
