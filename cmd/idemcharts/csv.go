package main

// The load tool's CSV (cmd/idembench -csv), read back: one Row a line, every
// mistake named by file and line.

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Header is the first line the CSV must have, exactly.
const Header = "series,clients,instances,metric,value,unit"

// Row is one measurement: for example series "unique" at 16 clients on 1
// instance, metric "throughput", 2150 "req/s".
type Row struct {
	Series    string
	Clients   int
	Instances int
	Metric    string
	Value     float64
	Unit      string
	File      string // the file it came from, for errors; may be empty
	Line      int    // in the file, for errors
}

func (r Row) where() string {
	if r.File == "" {
		return fmt.Sprintf("line %d", r.Line)
	}
	return fmt.Sprintf("%s:%d", r.File, r.Line)
}

// ParseError says which line of which CSV is wrong and why.
type ParseError struct {
	File string // empty when the reader was not named
	Line int
	Err  error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s: %v", Row{File: e.File, Line: e.Line}.where(), e.Err)
}
func (e *ParseError) Unwrap() error { return e.Err }

// ErrNoRows is returned for a CSV with a header and nothing else.
var ErrNoRows = errors.New("no rows")

// Parse reads the load tool's CSV; file names it in errors and rows (empty
// for none). Every row must have the six fields, positive integer clients
// and instances, a finite value, and a printable series, metric and unit.
// Rows that repeat a measurement are refused by [Charts], which sees every
// file.
func Parse(file string, r io.Reader) ([]Row, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // checked below, with a better message
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, &ParseError{File: file, Line: 1, Err: fmt.Errorf("empty file, want the header %q", Header)}
	}
	if err != nil {
		return nil, csvError(file, err)
	}
	if got := strings.Join(header, ","); got != Header {
		return nil, &ParseError{File: file, Line: 1, Err: fmt.Errorf("header %q, want %q", got, Header)}
	}
	var rows []Row
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, csvError(file, err)
		}
		line, _ := cr.FieldPos(0)
		row, err := parseRow(rec)
		if err != nil {
			return nil, &ParseError{File: file, Line: line, Err: err}
		}
		row.File, row.Line = file, line
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: %w", cmp.Or(file, "CSV"), ErrNoRows)
	}
	return rows, nil
}

func parseRow(rec []string) (Row, error) {
	if len(rec) != 6 {
		return Row{}, fmt.Errorf("%d fields, want 6 (%s)", len(rec), Header)
	}
	r := Row{Series: rec[0], Metric: rec[3], Unit: rec[5]}
	for i, name := range []string{"series", "metric", "unit"} {
		v := []string{r.Series, r.Metric, r.Unit}[i]
		if strings.TrimSpace(v) == "" {
			return Row{}, fmt.Errorf("empty %s", name)
		}
		if !utf8.ValidString(v) || strings.ContainsFunc(v, func(c rune) bool { return !unicode.IsPrint(c) }) {
			return Row{}, fmt.Errorf("%s %q: only printable text", name, v)
		}
	}
	var err error
	if r.Clients, err = positive("clients", rec[1]); err != nil {
		return Row{}, err
	}
	if r.Instances, err = positive("instances", rec[2]); err != nil {
		return Row{}, err
	}
	r.Value, err = strconv.ParseFloat(rec[4], 64)
	if err != nil || math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
		return Row{}, fmt.Errorf("value %q is not a finite number", rec[4])
	}
	return r, nil
}

func positive(name, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s %q is not a positive integer", name, s)
	}
	return n, nil
}

func csvError(file string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &ParseError{File: file, Line: pe.Line, Err: pe.Err}
	}
	return err
}

// duplicates refuses a measurement given twice (the same series, clients,
// instances and metric), in one file or across files: a chart could show
// only one of them.
func duplicates(rows []Row) error {
	first := map[[4]string]Row{}
	for _, r := range rows {
		id := [4]string{r.Series, strconv.Itoa(r.Clients), strconv.Itoa(r.Instances), r.Metric}
		if prev, dup := first[id]; dup {
			return &ParseError{File: r.File, Line: r.Line, Err: fmt.Errorf("%s at %d clients, %d instances: %s repeats %s",
				r.Series, r.Clients, r.Instances, r.Metric, prev.where())}
		}
		first[id] = r
	}
	return nil
}
