package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The command writes each chart where -out says, as Charts draws it, and
// names each file it writes.
func TestRun(t *testing.T) {
	out := t.TempDir()
	var stdout strings.Builder
	if err := run([]string{"-csv", "testdata/example.csv", "-out", out}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	rows := exampleRows(t)
	charts, err := Charts(rows)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, c := range charts {
		files = append(files, c.File)
		got, err := os.ReadFile(filepath.Join(out, c.File))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, c.SVG) {
			t.Errorf("%s differs from what Charts draws", c.File)
		}
		if line := filepath.Join(out, c.File) + ": " + c.Title + "\n"; !strings.Contains(stdout.String(), line) {
			t.Errorf("stdout %q does not say %q", stdout.String(), line)
		}
	}
	if got := strings.Join(files, " "); got != "performance-throughput.svg performance-replay.svg performance-wake.svg" {
		t.Errorf("charts %q, want the three", got)
	}
}

// Runs at two concurrencies, one file each, make one throughput chart.
func TestRunSeveralFiles(t *testing.T) {
	dir := t.TempDir()
	for clients, rows := range map[string]string{
		"16": "unique,16,1,throughput,2150,req/s\nfloor,16,1,throughput,2400,req/s\n",
		"64": "unique,64,1,throughput,2200,req/s\nfloor,64,1,throughput,2600,req/s\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, clients+".csv"), []byte("series,clients,instances,metric,value,unit\n"+rows), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := run([]string{"-csv", filepath.Join(dir, "16.csv"), "-csv", filepath.Join(dir, "64.csv"), "-out", dir}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "performance-throughput.svg"))
	if err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, svg)
	for _, want := range []string{"16", "64", "2,150", "2,400", "2,200", "2,600"} {
		if !slices.Contains(texts, want) {
			t.Errorf("the chart writes %q, want %q among them", texts, want)
		}
	}
	if err := run([]string{"-csv", filepath.Join(dir, "16.csv"), "-csv", filepath.Join(dir, "16.csv"), "-out", dir}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "repeats") {
		t.Errorf("the same file twice: %v, want a duplicate error", err)
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
		{[]string{"-csv", bad, "-out", t.TempDir()}, "bad.csv:2: value \"fast\""},
	} {
		if err := run(tc.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
