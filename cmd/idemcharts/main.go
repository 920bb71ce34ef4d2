// Command idemcharts draws the charts of docs/performance.md, with
// gonum.org/v1/plot, from the CSV the load tool writes (cmd/idembench -csv
// FILE, header "series,clients,instances,metric,value,unit"):
//
//	performance-throughput.svg  throughput against clients: unique, the
//	                            same-work floor and every other throughput
//	                            series but replay and http-bare
//	performance-replay.svg      replay against http-bare
//	performance-wake.svg        waiter wake latency (the wait* series)
//
// A chart without rows is not written. A run of the load tool is at one
// concurrency, so the throughput chart takes one file per run (-csv
// repeated); a measurement given twice is refused. Usage:
//
//	idemcharts -csv docs/performance-16.csv -csv docs/performance-64.csv -out docs
//
// or `make charts CSV="docs/performance-16.csv docs/performance-64.csv"`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	var files []string
	fs.Func("csv", "the load tool's CSV; repeat it for runs at several concurrencies (required)", func(path string) error {
		files = append(files, path)
		return nil
	})
	out := fs.String("out", "docs", "directory the SVG files are written to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(files) == 0 || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("-csv FILE is required, and nothing else")
	}
	var rows []Row
	for _, path := range files {
		rs, err := parseFile(path)
		if err != nil {
			return err
		}
		rows = append(rows, rs...)
	}
	charts, err := Charts(rows)
	if err != nil {
		return err
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

func parseFile(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(path, f)
}
