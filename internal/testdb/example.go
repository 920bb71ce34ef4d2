package testdb

import (
	"bytes"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"
)

// SchemaURL returns TEST_DATABASE_URL (directly, never through a pooler)
// with schema as its search_path: the URL a process or an example given
// DATABASE_URL uses to work in schema.
func SchemaURL(t testing.TB, schema string) string {
	t.Helper()
	u, err := url.Parse(URL(t))
	if err != nil {
		t.Fatalf("testdb: parse TEST_DATABASE_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema) // pgx passes unknown parameters to the server
	u.RawQuery = q.Encode()
	return u.String()
}

// WithApp returns rawURL with application_name set to app, so that a test
// can find the backends of what it connects in pg_stat_activity.
func WithApp(t testing.TB, rawURL, app string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("testdb: parse %q: %v", rawURL, err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// RunExample runs example, a runnable example that needs PostgreSQL, with
// DATABASE_URL naming a fresh schema (see [Schema]), and checks what it
// prints to stdout against its "// Prints:" comment: the comment lines
// that follow "// Prints:" in the body of func name in the file file (a
// path relative to the test's package). It is `// Output:` for an example
// that go test cannot run on its own, since it needs a database: without
// one, the test is skipped (failed in CI) like any other.
//
// It sets the environment and redirects os.Stdout, so the test must not
// be parallel.
func RunExample(t *testing.T, file, name string, example func()) {
	t.Helper()
	want, err := printsComment(file, name)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Setenv("DATABASE_URL", SchemaURL(t, Schema(t)))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	out := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		out <- b
	}()
	func() {
		defer func() { os.Stdout = stdout }()
		example()
	}()
	_ = w.Close()
	got := <-out
	if strings.TrimSpace(string(got)) != strings.TrimSpace(want) {
		t.Errorf("%s printed:\n%s\nwant (its // Prints: comment):\n%s", name, got, want)
	}
}

// printsComment returns the "// Prints:" block of func name in file.
func printsComment(file, name string) (string, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	_, body, ok := bytes.Cut(src, []byte("\nfunc "+name+"() {\n"))
	if !ok {
		return "", &exampleError{file, name, "no such function"}
	}
	if end := bytes.Index(body, []byte("\n}\n")); end >= 0 {
		body = body[:end]
	}
	_, block, ok := bytes.Cut(body, []byte("\t// Prints:\n"))
	if !ok {
		return "", &exampleError{file, name, `no "// Prints:" comment`}
	}
	var b strings.Builder
	for _, line := range strings.Split(string(block), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "//") {
			break
		}
		line = strings.TrimPrefix(strings.TrimPrefix(line, "//"), " ")
		b.WriteString(line + "\n")
	}
	return b.String(), nil
}

type exampleError struct{ file, name, problem string }

func (e *exampleError) Error() string { return e.file + ": " + e.name + ": " + e.problem }
