package main

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"image/color"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"
)

// The charts of the committed CSVs, of the example and of a crowd of close
// values at five client counts: every series, value, client count, unit and
// title of the CSV written, no text over another or off the page, and every
// mark where its value puts it.
func TestChartsDrawEveryRow(t *testing.T) {
	t.Parallel()
	for name, csv := range map[string]string{
		"docs":    readCSVs(t, "../../docs/performance-16.csv", "../../docs/performance-64.csv"),
		"example": readCSVs(t, "testdata/example.csv"),
		"crowd":   crowd(),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rows, err := Parse(name, strings.NewReader(csv))
			if err != nil {
				t.Fatal(err)
			}
			plans, err := plan(rows)
			if err != nil {
				t.Fatal(err)
			}
			if len(plans) != 3 {
				t.Fatalf("%d charts, want the throughput, replay and wake charts", len(plans))
			}
			for _, p := range plans {
				t.Run(p.file, func(t *testing.T) {
					f := p.figure()
					d := record(f)
					want := []string{p.title, p.unit}
					for _, r := range p.rows {
						want = append(want, num(r.Value))
					}
					if p.file == "performance-wake.svg" {
						for _, r := range p.rows {
							want = append(want, groupName(r), r.Metric)
						}
						wantTexts(t, d, want)
						barsInProportion(t, f, d, p.rows)
					} else {
						for _, r := range p.rows {
							want = append(want, label(r), strconv.Itoa(r.Clients))
						}
						wantTexts(t, d, append(want, "clients"))
						pointsWhereTheirValues(t, f, d, p.rows)
					}
					noOverlaps(t, d)
				})
			}
		})
	}
}

// readCSVs returns the files' rows as one CSV.
func readCSVs(t *testing.T, files ...string) string {
	t.Helper()
	var b strings.Builder
	for i, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			_, data, _ = bytes.Cut(data, []byte("\n")) // the header, once
		}
		b.Write(data)
	}
	return b.String()
}

// crowd is a CSV of every chart's series within a few percent of one
// another, at five client counts, and sixteen groups of wake latencies.
func crowd() string {
	var b strings.Builder
	b.WriteString(Header + "\n")
	for i, c := range []int{1, 4, 16, 64, 256} {
		for s := range 14 {
			fmt.Fprintf(&b, "series-%d,%d,1,throughput,%d,req/s\n", s, c, 2000+3*s+7*i)
		}
		fmt.Fprintf(&b, "http-bare,%d,1,throughput,%d,req/s\nreplay,%d,1,throughput,%d,req/s\n", c, 25000+i, c, 25010-i)
		for w := range 4 {
			fmt.Fprintf(&b, "wait-wake-%d,%d,3,p50,0.0%d,ms\nwait-wake-%d,%d,3,p99,%d.5,ms\n", w, c, w+1, w, c, 10*w+i)
		}
	}
	return b.String()
}

// Which rows go in which chart: throughput rows but replay and http-bare,
// those two, and the wait* latencies (not their sample counts).
func TestPlan(t *testing.T) {
	t.Parallel()
	rows := exampleRows(t)
	plans, err := plan(rows)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range plans {
		var series []string
		for _, r := range p.rows {
			if s := fmt.Sprintf("%s/%s", r.Series, r.Metric); !slices.Contains(series, s) {
				series = append(series, s)
			}
		}
		got = append(got, fmt.Sprintf("%s %s %s", p.file, p.unit, strings.Join(series, ",")))
	}
	want := []string{
		"performance-throughput.svg req/s floor/throughput,unique/throughput",
		"performance-replay.svg req/s http-bare/throughput,replay/throughput",
		"performance-wake.svg ms wait-wake/p50,wait-wake/p99",
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan = %q, want %q", got, want)
	}
}

func wantTexts(t *testing.T, d drawing, want []string) {
	t.Helper()
	var got []string
	for _, x := range d.texts {
		got = append(got, x.text)
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%q is not written; the chart writes %q", w, got)
		}
	}
}

// noOverlaps checks that no two texts overlap (by the metrics they are laid
// out with) and that every text is on the page.
func noOverlaps(t *testing.T, d drawing) {
	t.Helper()
	for i, a := range d.texts {
		if a.box.Min.X < 0 || a.box.Min.Y < 0 || a.box.Max.X > d.page.X || a.box.Max.Y > d.page.Y {
			t.Errorf("%q at %v is off the page (%v)", a.text, a.box, d.page)
		}
		for _, b := range d.texts[i+1:] {
			if overlap(a.box, b.box) {
				t.Errorf("%q at %v overlaps %q at %v", a.text, a.box, b.text, b.box)
			}
		}
	}
}

// overlap says whether two boxes share more than a sliver (a tenth of a
// point).
func overlap(a, b vg.Rectangle) bool {
	const sliver = 0.1
	return a.Min.X+sliver < b.Max.X && b.Min.X+sliver < a.Max.X && a.Min.Y+sliver < b.Max.Y && b.Min.Y+sliver < a.Max.Y
}

// pointsWhereTheirValues checks that every series of two points or more is
// one line through its points, left to right by clients, each at the height
// of its value, and that each point's label is written in its line's
// colour.
func pointsWhereTheirValues(t *testing.T, f *figure, d drawing, rows []Row) {
	t.Helper()
	var clients []int
	for _, r := range rows {
		if !slices.Contains(clients, r.Clients) {
			clients = append(clients, r.Clients)
		}
	}
	slices.Sort(clients)
	trX, trY := f.plot.Transforms(&d.data)
	byLine := map[string][]Row{}
	var lines []string
	for _, r := range rows {
		if _, ok := byLine[label(r)]; !ok {
			lines = append(lines, label(r))
		}
		byLine[label(r)] = append(byLine[label(r)], r)
	}
	for i, l := range lines {
		var want []vg.Point
		for _, r := range byLine[l] {
			want = append(want, vg.Point{X: trX(float64(slices.Index(clients, r.Clients))), Y: trY(r.Value)})
		}
		slices.SortFunc(want, func(a, b vg.Point) int { return cmp.Compare(a.X, b.X) })
		c := palette[i%len(palette)]
		if len(want) > 1 && !slices.ContainsFunc(d.strokes, func(s path) bool { return sameColor(s.color, c) && near(s.points, want) }) {
			t.Errorf("no line through %v in the colour of %s", want, l)
		}
		for _, r := range byLine[l] {
			if !slices.ContainsFunc(d.texts, func(x drawnText) bool { return x.text == num(r.Value) && sameColor(x.color, c) }) {
				t.Errorf("%s at %d clients: no label %q in its line's colour", l, r.Clients, num(r.Value))
			}
		}
	}
}

// barsInProportion checks that every row is a bar in its metric's colour,
// from zero to its value.
func barsInProportion(t *testing.T, f *figure, d drawing, rows []Row) {
	t.Helper()
	trX, _ := f.plot.Transforms(&d.data)
	var metrics []string
	for _, r := range rows {
		if !slices.Contains(metrics, r.Metric) {
			metrics = append(metrics, r.Metric)
		}
	}
	for _, r := range rows {
		c := palette[slices.Index(metrics, r.Metric)%len(palette)]
		found := slices.ContainsFunc(d.fills, func(p path) bool {
			lo, hi := bounds(p.points)
			return sameColor(p.color, c) && approx(lo.X, trX(0)) && approx(hi.X, trX(r.Value))
		})
		if !found {
			t.Errorf("%s %s: no bar in its colour from %v to %v", groupName(r), r.Metric, trX(0), trX(r.Value))
		}
	}
}

// A text label spread apart from its neighbours still says what it says.
func TestSpread(t *testing.T) {
	t.Parallel()
	const gap, lo, hi = 10, 0, 200
	for _, tc := range []struct {
		want, placed []vg.Length
	}{
		{[]vg.Length{50, 100, 150}, []vg.Length{50, 100, 150}},   // apart already: unmoved
		{[]vg.Length{100, 100}, []vg.Length{95, 105}},            // centred on where they want
		{[]vg.Length{104, 100, 96}, []vg.Length{110, 100, 90}},   // the same order
		{[]vg.Length{0, 1}, []vg.Length{0, 10}},                  // not below lo
		{[]vg.Length{200, 199, 198}, []vg.Length{200, 190, 180}}, // not above hi
		{[]vg.Length{50, 55, 62, 120}, []vg.Length{45.67, 55.67, 65.67, 120}},
	} {
		got := spread(tc.want, gap, lo, hi)
		for i := range got {
			if math.Abs(float64(got[i]-tc.placed[i])) > 0.01 {
				t.Errorf("spread(%v) = %v, want %v", tc.want, got, tc.placed)
				break
			}
		}
	}
	// Any wishes: the order kept, gap apart, inside [lo, hi] when they fit.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		want := make([]vg.Length, 1+rng.IntN(25))
		for i := range want {
			want[i] = vg.Length(rng.Float64()*260 - 30)
		}
		got := spread(want, gap, lo, hi)
		order := make([]int, len(want))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(want[a], want[b]) })
		for k := 1; k < len(order); k++ {
			if got[order[k]]-got[order[k-1]] < gap-1e-9 {
				t.Fatalf("spread(%v) = %v: %v and %v closer than %v", want, got, got[order[k-1]], got[order[k]], gap)
			}
		}
		if vg.Length(len(want)-1)*gap <= hi-lo && (got[order[0]] < lo-1e-9 || got[order[len(order)-1]] > hi+1e-9) {
			t.Fatalf("spread(%v) = %v: outside [%v, %v]", want, got, lo, hi)
		}
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
		top, ticks := axis([]float64{tc.hi})
		if top < tc.hi || !approx(vg.Length(top), vg.Length(tc.top)) || len(ticks) != tc.ticks || !approx(vg.Length(ticks[len(ticks)-1]), vg.Length(top)) {
			t.Errorf("axis(%v) = %v, %v; want top %v with %d ticks", tc.hi, top, ticks, tc.top, tc.ticks)
		}
	}
	// At the ends of float64: a finite top at or above the value, ticks
	// rising from zero to it.
	for _, hi := range []float64{math.MaxFloat64, 1.5e308, math.SmallestNonzeroFloat64, 1e-320} {
		top, ticks := axis([]float64{hi})
		if math.IsInf(top, 0) || math.IsNaN(top) || top < hi || len(ticks) < 2 || ticks[0] != 0 || ticks[len(ticks)-1] != top || !slices.IsSorted(ticks) {
			t.Errorf("axis(%v) = %v, %v; want a finite top at or above it, ticks from zero to it", hi, top, ticks)
		}
	}
}

func TestNum(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{0: "0", 4.2: "4.2", 0.048: "0.048", 10.256: "10.3", 2150: "2,150",
		1234567.89: "1,234,567.9", -12000: "-12,000", 0.25: "0.25", 0.6000000000000001: "0.6"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

// drawing is what a figure draws, on a page with its origin bottom left,
// in points.
type drawing struct {
	page    vg.Point    // the top right corner
	data    draw.Canvas // where the plot draws its data
	texts   []drawnText
	strokes []path
	fills   []path
}

type drawnText struct {
	text  string
	box   vg.Rectangle
	color color.Color
}

type path struct {
	color  color.Color
	points []vg.Point // the path's vertices (and arcs' centres)
}

// record draws f on a recorder and reads the drawing back, applying the
// transforms (the value axis' label is rotated).
func record(f *figure) drawing {
	w, h := f.size()
	var rec recorder.Canvas
	d := drawing{page: vg.Point{X: w, Y: h}}
	d.data = f.draw(draw.NewCanvas(&rec, w, h))
	type state struct {
		m     affine
		color color.Color
	}
	st := state{m: identity, color: color.Black}
	var stack []state
	points := func(p vg.Path) []vg.Point {
		var ps []vg.Point
		for _, c := range p {
			if c.Type != vg.CloseComp {
				ps = append(ps, st.m.apply(c.Pos))
			}
		}
		return ps
	}
	for _, a := range rec.Actions {
		switch a := a.(type) {
		case *recorder.Push:
			stack = append(stack, st)
		case *recorder.Pop:
			st, stack = stack[len(stack)-1], stack[:len(stack)-1]
		case *recorder.SetColor:
			st.color = a.Color
		case *recorder.Translate:
			st.m = st.m.then(affine{1, 0, 0, 1, float64(a.Point.X), float64(a.Point.Y)})
		case *recorder.Rotate:
			s, c := math.Sincos(a.Angle)
			st.m = st.m.then(affine{c, s, -s, c, 0, 0})
		case *recorder.Scale:
			st.m = st.m.then(affine{a.X, 0, 0, a.Y, 0, 0})
		case *recorder.Stroke:
			d.strokes = append(d.strokes, path{st.color, points(a.Path)})
		case *recorder.Fill:
			d.fills = append(d.fills, path{st.color, points(a.Path)})
		case *recorder.FillString:
			face := font.DefaultCache.Lookup(a.Font, a.Size)
			e := face.Extents()
			lo, hi := bounds([]vg.Point{
				st.m.apply(vg.Point{X: a.Point.X, Y: a.Point.Y - e.Descent}),
				st.m.apply(vg.Point{X: a.Point.X + face.Width(a.String), Y: a.Point.Y + e.Ascent}),
			})
			d.texts = append(d.texts, drawnText{a.String, vg.Rectangle{Min: lo, Max: hi}, st.color})
		}
	}
	return d
}

// affine maps (x, y) to (a x + c y + e, b x + d y + f).
type affine struct{ a, b, c, d, e, f float64 }

var identity = affine{1, 0, 0, 1, 0, 0}

// then is m applied after n: n maps to m's coordinates.
func (m affine) then(n affine) affine {
	return affine{
		m.a*n.a + m.c*n.b, m.b*n.a + m.d*n.b,
		m.a*n.c + m.c*n.d, m.b*n.c + m.d*n.d,
		m.a*n.e + m.c*n.f + m.e, m.b*n.e + m.d*n.f + m.f,
	}
}

func (m affine) apply(p vg.Point) vg.Point {
	x, y := float64(p.X), float64(p.Y)
	return vg.Point{X: vg.Length(m.a*x + m.c*y + m.e), Y: vg.Length(m.b*x + m.d*y + m.f)}
}

func bounds(ps []vg.Point) (lo, hi vg.Point) {
	lo, hi = ps[0], ps[0]
	for _, p := range ps[1:] {
		lo = vg.Point{X: min(lo.X, p.X), Y: min(lo.Y, p.Y)}
		hi = vg.Point{X: max(hi.X, p.X), Y: max(hi.Y, p.Y)}
	}
	return lo, hi
}

func near(got, want []vg.Point) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !approx(got[i].X, want[i].X) || !approx(got[i].Y, want[i].Y) {
			return false
		}
	}
	return true
}

func approx(a, b vg.Length) bool { return math.Abs(float64(a-b)) < 0.01 }

func sameColor(a, b color.Color) bool {
	r1, g1, b1, a1 := a.RGBA()
	r2, g2, b2, a2 := b.RGBA()
	return r1 == r2 && g1 == g2 && b1 == b2 && a1 == a2
}

// svgTexts returns the contents of an SVG's text elements.
func svgTexts(t *testing.T, svg []byte) []string {
	t.Helper()
	var texts []string
	d := xml.NewDecoder(bytes.NewReader(svg))
	inText := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return texts
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			inText = tok.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			inText = false
		}
	}
}

// The committed charts are the committed CSVs' (make charts draws them).
func TestCommittedChartsAreCurrent(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	if err := run([]string{"-csv", "../../docs/performance-16.csv", "-csv", "../../docs/performance-64.csv", "-out", out}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"performance-throughput.svg", "performance-replay.svg", "performance-wake.svg"} {
		got, err := os.ReadFile(out + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile("../../docs/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, committed) {
			t.Errorf("docs/%s is not what the committed CSVs draw: run %s", f,
				fmt.Sprintf("make charts CSV=%q", "docs/performance-16.csv docs/performance-64.csv"))
		}
	}
}
