package idem_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocsLinksResolve: every relative link in the project's Markdown pages
// leads somewhere: the file it names exists, and an anchor it names is a
// heading of that page. The docs are kept short by saying a thing once and
// linking to it, so a renamed heading or a moved page would otherwise leave
// a reader at a dead end.
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md", "CONTRIBUTING.md")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		a, err := headingAnchors(page)
		if err != nil {
			t.Fatal(err)
		}
		anchors[page] = a
		return a
	}
	for _, page := range pages {
		links, err := relativeLinks(page)
		if err != nil {
			t.Fatal(err)
		}
		undefined, err := undefinedReferences(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range undefined {
			t.Errorf("%s: reference link [%s] has no definition ([%s]: url)", page, name, name)
		}
		for _, l := range links {
			target, anchor, _ := strings.Cut(l.target, "#")
			path := page
			if target != "" {
				path = filepath.Join(filepath.Dir(page), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", page, l.line, l.target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				t.Errorf("%s:%d: link to %s: %s has no heading with anchor #%s", page, l.line, l.target, path, anchor)
			}
		}
	}
}

// TestCodeLinksToDocsResolve: the links Go comments give into the docs
// (package docs point at the design.md section with the details) name
// headings that exist.
func TestCodeLinksToDocsResolve(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range docLink.FindAllStringSubmatch(string(data), -1) {
			page := filepath.Join("docs", m[1])
			anchors, err := headingAnchors(page)
			if err != nil {
				t.Errorf("%s: link to %s: %v", path, m[0], err)
				continue
			}
			if !anchors[m[2]] {
				t.Errorf("%s: link to %s: %s has no heading with anchor #%s", path, m[0], page, m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// docLink matches a link from code into the docs: …docs/<page>.md#<anchor>.
var docLink = regexp.MustCompile(`docs/([a-z]+\.md)#([A-Za-z0-9_-]+)`)

func TestHeadingAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Scopes: who is asking":                                  "scopes-who-is-asking",
		"The MCP adapter (package `mcphttp`)":                    "the-mcp-adapter-package-mcphttp",
		"Claim: one statement, no lock-then-act":                 "claim-one-statement-no-lock-then-act",
		"Distributed PostgreSQL: Citus, CockroachDB, YugabyteDB": "distributed-postgresql-citus-cockroachdb-yugabytedb",
		"`idem forget` and --force":                              "idem-forget-and---force",
	} {
		if got := headingAnchor(heading); got != want {
			t.Errorf("headingAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

type link struct {
	line   int
	target string
}

// markdownLink matches an inline link's target: ](target) or ](target "title").
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// referenceLink matches a reference definition: [name]: target.
var referenceLink = regexp.MustCompile(`^\[[^\]]+\]:\s+(\S+)`)

// relativeLinks returns the links of page outside code blocks and inline
// code that lead within the repository (no scheme, not mailto).
func relativeLinks(page string) ([]link, error) {
	f, err := os.Open(page)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var links []link
	inCode := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		line = stripInlineCode(line)
		var targets []string
		for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := referenceLink.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links = append(links, link{line: n, target: target})
		}
	}
	return links, sc.Err()
}

// fullReference matches a full reference link's label: [text][label].
var fullReference = regexp.MustCompile(`\]\[([^\]]+)\]`)

// undefinedReferences returns the labels of page's full reference links
// ([text][label], outside code) that no [label]: definition gives.
func undefinedReferences(page string) ([]string, error) {
	data, err := os.ReadFile(page)
	if err != nil {
		return nil, err
	}
	defined := map[string]bool{}
	var used []string
	inCode := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		if m := referenceDefinition.FindStringSubmatch(line); m != nil {
			defined[strings.ToLower(m[1])] = true
		}
		for _, m := range fullReference.FindAllStringSubmatch(stripInlineCode(line), -1) {
			used = append(used, m[1])
		}
	}
	var undefined []string
	for _, label := range used {
		if !defined[strings.ToLower(label)] {
			undefined = append(undefined, label)
		}
	}
	return undefined, nil
}

// referenceDefinition matches a reference definition's label: [label]: url.
var referenceDefinition = regexp.MustCompile(`^\[([^\]]+)\]:\s`)

// stripInlineCode removes `code spans`, where a ](…) is text, not a link.
func stripInlineCode(line string) string {
	var b strings.Builder
	inCode := false
	for _, r := range line {
		if r == '`' {
			inCode = !inCode
			continue
		}
		if !inCode {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// headingAnchors returns the anchors of page's headings as GitHub makes
// them, a repeated heading's with -1, -2, … after the first.
func headingAnchors(page string) (map[string]bool, error) {
	data, err := os.ReadFile(page)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := headingAnchor(heading)
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors, nil
}

// headingAnchor is GitHub's anchor for a heading: lower case, letters,
// digits, hyphens and underscores kept, spaces made hyphens, the rest
// dropped.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
