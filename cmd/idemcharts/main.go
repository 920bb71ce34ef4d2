// Command idemcharts draws the charts of docs/performance.md from the CSV
// the load tool writes (cmd/idembench -csv FILE, header
// "series,clients,instances,metric,value,unit"):
//
//	performance-throughput.svg  throughput against clients: unique, the
//	                            same-work floor and every other throughput
//	                            series but replay and http-bare
//	performance-replay.svg      replay against http-bare
//	performance-wake.svg        waiter wake latency (the wait* series)
//
// A chart without rows is not written. Usage:
//
//	idemcharts -csv docs/performance.csv -out docs
//
// or `make charts CSV=docs/performance.csv`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/internal/perfchart"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "idemcharts:", err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("idemcharts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	csvPath := fs.String("csv", "", "the load tool's CSV (required)")
	out := fs.String("out", "docs", "directory the SVG files are written to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *csvPath == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("-csv FILE is required, and nothing else")
	}
	f, err := os.Open(*csvPath)
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := perfchart.Parse(f)
	if err != nil {
		return fmt.Errorf("%s: %w", *csvPath, err)
	}
	charts, err := perfchart.Charts(rows)
	if err != nil {
		return fmt.Errorf("%s: %w", *csvPath, err)
	}
	for _, c := range charts {
		path := filepath.Join(*out, c.File)
		if err := os.WriteFile(path, c.SVG, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %s\n", path, c.Title)
	}
	return nil
}
