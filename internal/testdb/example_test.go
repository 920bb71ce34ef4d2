package testdb

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryExampleIsChecked: every runnable example in the repository has
// its output checked, by go test (an Output comment) or, for one that
// needs PostgreSQL, by a RunExample call in its package (a Prints
// comment). An example whose output nobody checks only compiles.
func TestEveryExampleIsChecked(t *testing.T) {
	t.Parallel()
	example := regexp.MustCompile(`(?s)\nfunc (Example\w*)\(\) \{\n(.*?)\n\}\n`)
	checked := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range example.FindAllStringSubmatch(string(src), -1) {
			name, body := m[1], m[2]
			switch {
			case strings.Contains(body, "// Output:"), strings.Contains(body, "// Unordered output:"):
			case strings.Contains(body, "// Prints:"):
				if !packageRuns(t, filepath.Dir(path), `RunExample(t, "`+filepath.Base(path)+`", "`+name+`", `+name+`)`) {
					t.Errorf("%s: %s has a Prints comment but no RunExample call in its package checks it", path, name)
				}
			default:
				t.Errorf("%s: %s has no Output (or Prints) comment: its output is not checked", path, name)
			}
			checked++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 5 {
		t.Fatalf("found %d examples; the walk is broken", checked)
	}
}

// packageRuns reports whether a test file in dir contains call.
func packageRuns(t *testing.T, dir, call string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if src, err := os.ReadFile(f); err == nil && strings.Contains(string(src), call) {
			return true
		}
	}
	return false
}
