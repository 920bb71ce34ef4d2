package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	out := t.TempDir()
	var stdout strings.Builder
	if err := run([]string{"-csv", "../../internal/perfchart/testdata/example.csv", "-out", out}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"performance-throughput.svg", "performance-replay.svg", "performance-wake.svg"} {
		got, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("../../internal/perfchart/testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from the perfchart golden file", f)
		}
		if !strings.Contains(stdout.String(), filepath.Join(out, f)) {
			t.Errorf("stdout %q does not name %s", stdout.String(), f)
		}
	}
}

func TestRunErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(bad, []byte("series,clients,instances,metric,value,unit\nunique,16,1,throughput,fast,req/s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-csv FILE is required"},
		{[]string{"-csv", bad, "extra"}, "-csv FILE is required"},
		{[]string{"-csv", filepath.Join(t.TempDir(), "missing.csv")}, "no such file"},
		{[]string{"-csv", bad, "-out", t.TempDir()}, "bad.csv: line 2: value \"fast\""},
	} {
		if err := run(tc.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
