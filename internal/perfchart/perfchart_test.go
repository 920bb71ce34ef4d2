package perfchart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden SVGs in testdata")

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
// together, and a measurement in two files is refused with both places.
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
	if n := strings.Count(string(charts[0].SVG), "<circle"); n != 4 {
		t.Errorf("%d points, want 4 (two series at two concurrencies)", n)
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

// element is an SVG element, for the structural checks.
type element struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Content string     `xml:",chardata"`
	Kids    []element  `xml:",any"`
}

func (e element) attr(name string) string {
	for _, a := range e.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (e element) walk(f func(element)) {
	f(e)
	for _, k := range e.Kids {
		k.walk(f)
	}
}

func num64(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// The example CSV gives three charts, equal to the golden files, each a
// well-formed SVG with one line per series (bars per measurement), every
// mark inside the plot, and a taller mark for a larger value.
func TestChartsFromExample(t *testing.T) {
	t.Parallel()
	f, err := os.Open("testdata/example.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := Parse("example.csv", f)
	if err != nil {
		t.Fatal(err)
	}
	charts, err := Charts(rows)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, c := range charts {
		files = append(files, c.File)
	}
	if got := strings.Join(files, " "); got != "performance-throughput.svg performance-replay.svg performance-wake.svg" {
		t.Fatalf("charts %q", got)
	}
	wantMarks := map[string]struct {
		kind  string
		count int
	}{
		"performance-throughput.svg": {"polyline", 3}, // floor, unique, unique ×3 instances
		"performance-replay.svg":     {"polyline", 2},
		"performance-wake.svg":       {"rect", 4}, // p50 and p99 at 1 and at 3 instances
	}
	for _, c := range charts {
		golden := filepath.Join("testdata", c.File)
		if *update {
			if err := os.WriteFile(golden, c.SVG, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c.SVG, want) {
			t.Errorf("%s differs from %s (go test -update to accept it after looking at it)", c.File, golden)
		}

		var root element
		if err := xml.NewDecoder(bytes.NewReader(c.SVG)).Decode(&root); err != nil {
			t.Fatalf("%s is not well-formed XML: %v", c.File, err)
		}
		if root.XMLName.Local != "svg" || root.XMLName.Space != "http://www.w3.org/2000/svg" {
			t.Fatalf("%s: root %v, want an svg element", c.File, root.XMLName)
		}
		marks := 0
		heights := map[string]float64{} // bar title -> height
		root.walk(func(e element) {
			if e.attr("class") != "series" {
				return
			}
			if e.XMLName.Local != wantMarks[c.File].kind {
				t.Errorf("%s: series mark <%s>, want <%s>", c.File, e.XMLName.Local, wantMarks[c.File].kind)
			}
			marks++
			switch e.XMLName.Local {
			case "polyline":
				for _, p := range strings.Fields(e.attr("points")) {
					xs, ys, _ := strings.Cut(p, ",")
					if x, y := num64(t, xs), num64(t, ys); x < left || x > left+plotW || y < top || y > top+plotH {
						t.Errorf("%s: point %s outside the plot", c.File, p)
					}
				}
			case "rect":
				y, h := num64(t, e.attr("y")), num64(t, e.attr("height"))
				if y < top || y+h > top+plotH+0.05 || h <= 0 {
					t.Errorf("%s: bar y=%v height=%v outside the plot", c.File, y, h)
				}
				heights[e.Kids[0].Content] = h
			}
		})
		if marks != wantMarks[c.File].count {
			t.Errorf("%s: %d series marks, want %d", c.File, marks, wantMarks[c.File].count)
		}
		if c.File == "performance-wake.svg" {
			p50 := heights["wait-wake ×3 instances, 16 clients p50: 1.6 ms"]
			p99 := heights["wait-wake ×3 instances, 16 clients p99: 4.2 ms"]
			if p50 <= 0 || p99/p50 < 4.2/1.6-0.01 || p99/p50 > 4.2/1.6+0.01 {
				t.Errorf("performance-wake.svg: bars of %v and %v for 1.6 and 4.2 ms, want heights in proportion (titles: %v)", p50, p99, heights)
			}
		}
	}
}

// A CSV with only throughput rows gives only the throughput chart.
func TestChartsSkipEmpty(t *testing.T) {
	t.Parallel()
	rows, err := Parse("", strings.NewReader(Header+"\nunique,16,1,throughput,2150,req/s\n"))
	if err != nil {
		t.Fatal(err)
	}
	charts, err := Charts(rows)
	if err != nil || len(charts) != 1 || charts[0].File != "performance-throughput.svg" {
		t.Fatalf("Charts = %d charts, %v; want performance-throughput.svg alone", len(charts), err)
	}
}

func TestAxis(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		hi, top float64
		ticks   int
	}{
		{2900, 3000, 4},
		{9800, 10000, 6},
		{4.2, 5, 6},
		{0.3, 0.3, 4},
		{0, 1, 6},
		{12500, 15000, 4},
	} {
		top, ticks := axis([]Row{{Value: tc.hi}})
		if top < tc.hi || !near(top, tc.top) || len(ticks) != tc.ticks || !near(ticks[len(ticks)-1], top) {
			t.Errorf("axis(%v) = %v, %v; want top %v with %d ticks", tc.hi, top, ticks, tc.top, tc.ticks)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestNum(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{0: "0", 4.2: "4.2", 2150: "2,150", 1234567.89: "1,234,567.9", -12000: "-12,000", 0.25: "0.25", 0.6000000000000001: "0.6"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
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
