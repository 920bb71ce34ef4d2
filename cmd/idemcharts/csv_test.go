package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	t.Parallel()
	const h = Header + "\n"
	for _, tc := range []struct {
		name, csv string
		line      int
		want      string
	}{
		{"empty", "", 1, "empty file"},
		{"other header", "series,clients,metric,value\n", 1, "header"},
		{"header only", h, 0, "no rows"},
		{"missing field", h + "unique,16,1,throughput,2150\n", 2, "5 fields, want 6"},
		{"extra field", h + "unique,16,1,throughput,2150,req/s,x\n", 2, "7 fields"},
		{"clients not a number", h + "unique,many,1,throughput,2150,req/s\n", 2, `clients "many"`},
		{"zero clients", h + "unique,0,1,throughput,2150,req/s\n", 2, `clients "0"`},
		{"negative instances", h + "unique,16,-1,throughput,2150,req/s\n", 2, `instances "-1"`},
		{"value not a number", h + "unique,16,1,throughput,fast,req/s\n", 2, `value "fast"`},
		{"NaN", h + "unique,16,1,throughput,NaN,req/s\n", 2, "finite"},
		{"infinite", h + "unique,16,1,throughput,+Inf,req/s\n", 2, "finite"},
		{"empty series", h + ",16,1,throughput,2150,req/s\n", 2, "empty series"},
		{"control character", h + "unique,16,1,throughput,2150,\x01\n", 2, "printable"},
		{"invalid UTF-8", h + "uni\xffque,16,1,throughput,2150,req/s\n", 2, "printable"},
		{"empty unit", h + "unique,16,1,throughput,2150,\n", 2, "empty unit"},
		{"duplicate", h + "floor,16,1,throughput,1,req/s\nunique,16,1,throughput,2150,req/s\nunique,16,1,throughput,2200,req/s\n", 4, "bench.csv:4: unique at 16 clients, 1 instances: throughput repeats bench.csv:3"},
		{"negative throughput", h + "unique,16,1,throughput,-1,req/s\n", 2, "negative"},
		{"negative latency", h + "wait-wake-1,16,1,p99,-0.5,ms\n", 2, "negative"},
		{"bad quoting", h + "\"unique,16,1,throughput,2150,req/s\n", 2, "quote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rows, err := Parse("bench.csv", strings.NewReader(tc.csv))
			if err == nil {
				_, err = Charts(rows)
			}
			if err == nil {
				t.Fatalf("Parse and Charts = %d rows, nil error; want an error with %q", len(rows), tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			var pe *ParseError
			switch {
			case tc.line == 0:
				if !errors.Is(err, ErrNoRows) {
					t.Errorf("error %v, want ErrNoRows", err)
				}
			case !errors.As(err, &pe):
				t.Errorf("error %T, want a *ParseError", err)
			case pe.Line != tc.line:
				t.Errorf("error on line %d, want %d", pe.Line, tc.line)
			}
		})
	}
}

// exampleRows are the rows of testdata/example.csv.
func exampleRows(t *testing.T) []Row {
	t.Helper()
	rows, err := parseFile("testdata/example.csv")
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestParse(t *testing.T) {
	t.Parallel()
	rows, err := Parse("", strings.NewReader(Header+"\r\nwait-wake,16,3,p99,4.2,ms\r\nunique,16,1,throughput,2150,req/s\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Series: "wait-wake", Clients: 16, Instances: 3, Metric: "p99", Value: 4.2, Unit: "ms", Line: 2},
		{Series: "unique", Clients: 16, Instances: 1, Metric: "throughput", Value: 2150, Unit: "req/s", Line: 3},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
}

// Runs at several concurrencies come as several files: their rows chart
// together (TestRunSeveralFiles), and a measurement in two files is refused
// with both places.
func TestSeveralFiles(t *testing.T) {
	t.Parallel()
	at16, err := Parse("c16.csv", strings.NewReader(Header+"\nunique,16,1,throughput,2150,req/s\nfloor,16,1,throughput,2400,req/s\n"))
	if err != nil {
		t.Fatal(err)
	}
	at64, err := Parse("c64.csv", strings.NewReader(Header+"\nunique,64,1,throughput,2200,req/s\nfloor,64,1,throughput,2600,req/s\n"))
	if err != nil {
		t.Fatal(err)
	}
	charts, err := Charts(append(at16, at64...))
	if err != nil || len(charts) != 1 {
		t.Fatalf("Charts = %d charts, %v; want the throughput chart", len(charts), err)
	}
	_, err = Charts(append(at16, at16[1]))
	if err == nil || !strings.Contains(err.Error(), "c16.csv:3: floor at 16 clients, 1 instances: throughput repeats c16.csv:3") {
		t.Errorf("Charts with a row twice = %v, want a duplicate error naming both places", err)
	}
}

func TestMixedUnitsRefused(t *testing.T) {
	t.Parallel()
	rows, err := Parse("", strings.NewReader(Header+"\nunique,16,1,throughput,2150,req/s\nfloor,16,1,throughput,2.4,kreq/s\n"))
	if err != nil {
		t.Fatal(err)
	}
	var pe *ParseError
	if _, err := Charts(rows); !errors.As(err, &pe) || pe.Line != 3 || !strings.Contains(err.Error(), "kreq/s") || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("Charts = %v, want a *ParseError on line 3 naming the other unit", err)
	}
}

func FuzzParse(f *testing.F) {
	seed, err := os.ReadFile("testdata/example.csv")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(Header + "\n\"a\"\"b\",1,1,p99,1e308,ms\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := Parse("fuzz.csv", bytes.NewReader(data))
		if err != nil {
			return
		}
		charts, err := Charts(rows)
		if err != nil {
			return
		}
		for _, c := range charts {
			d := xml.NewDecoder(bytes.NewReader(c.SVG))
			for {
				if _, err := d.Token(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("%s is not well-formed: %v\n%s", c.File, err, c.SVG)
				}
			}
		}
	})
}
