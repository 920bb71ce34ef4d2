package idemcall_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestDoorsDocShowsTheExamples: every Go block of docs/doors.md is the
// runnable example its marker names (<!-- path Name -->, path from the
// repository's root), byte for byte, so what the page shows is what the
// doors' tests run.
func TestDoorsDocShowsTheExamples(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/doors.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)<!-- (\\S+) (\\w+) -->\n```go\n(.*?)```\n").FindAllSubmatch(doc, -1)
	if len(blocks) < 4 {
		t.Fatalf("docs/doors.md has %d marked Go blocks, want one per door (4)", len(blocks))
	}
	for _, b := range blocks {
		path, name, block := string(b[1]), string(b[2]), b[3]
		src, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		_, fn, ok := bytes.Cut(src, []byte("\nfunc "+name+"("))
		end := bytes.Index(fn, []byte("\n}\n"))
		if !ok || end < 0 {
			t.Errorf("%s has no func %s", path, name)
			continue
		}
		if want := append([]byte("func "+name+"("), fn[:end+3]...); !bytes.Equal(block, want) {
			t.Errorf("docs/doors.md's block for %s %s differs from the example: copy the function into the block", path, name)
		}
	}
}
