package main

// The charts, drawn with gonum.org/v1/plot: which rows go in which chart,
// and how each chart is laid out.

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	xfont "golang.org/x/image/font"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"golang.org/x/text/number"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Chart is one figure of docs/performance.md.
type Chart struct {
	File  string // "performance-throughput.svg"
	Title string
	SVG   []byte
}

// The series the replay chart compares; the throughput chart shows every
// other throughput series. Wake latency is every series named wait*.
const (
	seriesReplay   = "replay"
	seriesHTTPBare = "http-bare"
	wakePrefix     = "wait"
	metricThrough  = "throughput"
)

// timeUnits are the units of the rows the wake chart draws.
var timeUnits = []string{"ns", "us", "µs", "ms", "s"}

// Charts draws every chart the rows have data for, in a fixed order:
//
//	performance-throughput.svg  throughput against clients, every series but
//	                            replay and http-bare
//	performance-replay.svg      replay against http-bare
//	performance-wake.svg        the latencies (rows in ns, us, µs, ms or s)
//	                            of the wait* series, grouped by series,
//	                            instances and clients
//
// A measurement given twice, a chart whose rows disagree on the unit, or a
// negative value in a chart is an error.
func Charts(rows []Row) ([]Chart, error) {
	plans, err := plan(rows)
	if err != nil {
		return nil, err
	}
	var charts []Chart
	for _, p := range plans {
		svg, err := p.figure().svg()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.file, err)
		}
		charts = append(charts, Chart{File: p.file, Title: p.title, SVG: svg})
	}
	return charts, nil
}

// chartPlan is a chart before it is drawn: its rows, all in one unit, and
// how they are drawn.
type chartPlan struct {
	file, title, unit string
	rows              []Row
	draw              func(title, unit string, rows []Row) *figure
}

func (p chartPlan) figure() *figure { return p.draw(p.title, p.unit, p.rows) }

// plan sorts the rows into the charts (see Charts), leaving out the charts
// without rows.
func plan(rows []Row) ([]chartPlan, error) {
	if err := duplicates(rows); err != nil {
		return nil, err
	}
	var through, replay, wake []Row
	for _, r := range rows {
		switch {
		case strings.HasPrefix(r.Series, wakePrefix):
			if slices.Contains(timeUnits, r.Unit) { // latencies; counts are not drawn
				wake = append(wake, r)
			}
		case r.Metric != metricThrough:
		case r.Series == seriesReplay || r.Series == seriesHTTPBare:
			replay = append(replay, r)
		default:
			through = append(through, r)
		}
	}
	var plans []chartPlan
	for _, p := range []chartPlan{
		{file: "performance-throughput.svg", title: "Throughput against clients", rows: through, draw: lineChart},
		{file: "performance-replay.svg", title: "Replay against bare HTTP", rows: replay, draw: lineChart},
		{file: "performance-wake.svg", title: "Waiter wake latency after the completing commit", rows: wake, draw: barChart},
	} {
		if len(p.rows) == 0 {
			continue
		}
		p.unit = p.rows[0].Unit
		for _, r := range p.rows {
			if r.Unit != p.unit {
				return nil, &ParseError{File: r.File, Line: r.Line, Err: fmt.Errorf("%s: unit %q, but %s of the same chart says %q", p.file, r.Unit, p.rows[0].where(), p.unit)}
			}
			if r.Value < 0 {
				return nil, &ParseError{File: r.File, Line: r.Line, Err: fmt.Errorf("%s: value %v is negative: its axis starts at zero", p.file, r.Value)}
			}
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// The fonts: Liberation Sans, whose metrics gonum/plot lays the text out
// with, is metric-compatible with Arial, which figure.svg names as the
// fallback for a reader without it.
func init() {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	plotter.DefaultFont = plot.DefaultFont
}

// Sizes, in points (an SVG user unit each).
const (
	lineWidth, lineHeight = 560, 400 // a line chart's plot, legend aside
	barThickness          = 11       // a bar of the wake chart
	groupNameHeight       = 14       // a group's name, above its bars
	groupGap              = 8        // between the wake chart's groups
	margin                = 12       // around everything
	legendGap             = 16       // between the plot and its legend
	labelSize             = 9        // the values written beside marks
)

// palette is matplotlib's tab10 and two darker colours of its tab20b: the
// throughput chart has eleven lines. A line chart also varies the glyph,
// for readers who do not tell the colours apart.
var palette = []color.Color{
	rgb(0x1f77b4), rgb(0xd62728), rgb(0x2ca02c), rgb(0xff7f0e), rgb(0x9467bd), rgb(0x8c564b),
	rgb(0xe377c2), rgb(0x7f7f7f), rgb(0xbcbd22), rgb(0x17becf), rgb(0x393b79), rgb(0x637939),
}

func rgb(c uint32) color.Color {
	return color.RGBA{R: uint8(c >> 16), G: uint8(c >> 8), B: uint8(c), A: 0xff}
}

// figure is a plot with its legend to its right.
type figure struct {
	plot          *plot.Plot
	legend        plot.Legend
	width, height vg.Length // the plot's, legend and margins excluded
}

func newFigure(title string) *figure {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = 14
	p.Title.TextStyle.Font.Weight = xfont.WeightBold
	p.Title.Padding = 10
	p.X.Label.Padding = 4 // clear of the tick labels' descent
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = 11
	legend.Padding = 3
	return &figure{plot: p, legend: legend}
}

// draw draws the figure on c, which is its size (see size), and returns
// the area of c its plot draws the data in.
func (f *figure) draw(c draw.Canvas) (data draw.Canvas) {
	c.SetColor(color.White) // the legend's and the margins' too: readable on a dark page
	c.Fill(c.Rectangle.Path())
	c = draw.Crop(c, margin, -margin, margin, -margin)
	plotArea := draw.Crop(c, 0, -(legendGap + f.legendRoom()), 0, 0)
	f.plot.Draw(plotArea)
	data = f.plot.DataCanvas(plotArea)
	f.legend.Draw(draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
		Min: vg.Point{X: plotArea.Max.X + legendGap, Y: data.Min.Y},
		Max: vg.Point{X: c.Max.X, Y: data.Max.Y},
	}})
	return data
}

// legendRoom is the legend's width, and a fifth more: DejaVu Sans, the
// sans-serif of a Linux reader without Liberation Sans or Arial, is wider
// than either.
func (f *figure) legendRoom() vg.Length {
	return 1.2 * f.legend.Rectangle(draw.Canvas{}).Size().X
}

// size is the whole figure's: the plot, the legend and the margins.
func (f *figure) size() (w, h vg.Length) {
	return f.width + legendGap + f.legendRoom() + 2*margin, f.height + 2*margin
}

// fontFamily is how gonum/plot names the font in the SVG, and what a
// reader without it should use instead.
var fontFamily = [2][]byte{[]byte("font-family:Liberation Sans;"), []byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")}

func (f *figure) svg() ([]byte, error) {
	c := vgsvg.New(f.size())
	f.draw(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, err
	}
	return bytes.ReplaceAll(b.Bytes(), fontFamily[0], fontFamily[1]), nil
}

// label names a line or a group: the series, with the instance count when
// more than one.
func label(r Row) string {
	if r.Instances == 1 {
		return r.Series
	}
	return fmt.Sprintf("%s ×%d instances", r.Series, r.Instances)
}

// lineChart draws value against clients, one line per series and instance
// count, in the order they first appear, each point labelled with its
// value; clients are evenly spaced categories (4, 16, 64 would crowd a
// linear axis).
func lineChart(title, unit string, rows []Row) *figure {
	var clients []int
	var lines []string
	points := map[string][]Row{}
	for _, r := range rows {
		if !slices.Contains(clients, r.Clients) {
			clients = append(clients, r.Clients)
		}
		l := label(r) + "\x00" + r.Metric
		if _, seen := points[l]; !seen {
			lines = append(lines, l)
		}
		points[l] = append(points[l], r)
	}
	slices.Sort(clients)

	f := newFigure(title)
	f.width, f.height = lineWidth, lineHeight
	p := f.plot
	names := make([]string, len(clients))
	for i, c := range clients {
		names[i] = strconv.Itoa(c)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(clients))-0.5
	p.X.Label.Text = "clients"
	p.X.Padding, p.Y.Padding = 0, 0 // the axes meet at zero
	valueAxis(&p.Y, unit, values(rows))
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	p.Add(grid)

	valueLabels := &pointLabels{}
	for i, l := range lines {
		ps := points[l]
		slices.SortFunc(ps, func(a, b Row) int { return cmp.Compare(a.Clients, b.Clients) })
		xys := make(plotter.XYs, len(ps))
		for j, r := range ps {
			column := slices.Index(clients, r.Clients)
			xys[j] = plotter.XY{X: float64(column), Y: r.Value}
			valueLabels.add(pointLabel{x: xys[j].X, y: r.Value, text: num(r.Value), color: palette[i%len(palette)],
				left: column == 0 && len(clients) > 1})
		}
		line, marks, _ := plotter.NewLinePoints(xys) // cannot fail: the values are finite
		line.Color, line.Width = palette[i%len(palette)], 2
		marks.Color, marks.Shape, marks.Radius = line.Color, plotutil.Shape(i), 3.5
		p.Add(line, marks)
		f.legend.Add(legendName(l), line, marks)
	}
	p.Add(valueLabels)
	return f
}

// legendName is a line's label, with the metric when it is not throughput.
func legendName(line string) string {
	name, metric, _ := strings.Cut(line, "\x00")
	if metric == metricThrough {
		return name
	}
	return name + " " + metric
}

// barChart draws one group of horizontal bars per series, instance count
// and client count, top to bottom, one bar per metric (p50, p99), metrics in
// the order they first appear, each bar labelled with its value and each
// group with its name, above its bars: a name of any length fits, in any
// font.
func barChart(title, unit string, rows []Row) *figure {
	// Groups by series, then instances, then clients.
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Series, b.Series), cmp.Compare(a.Instances, b.Instances), cmp.Compare(a.Clients, b.Clients))
	})
	var groups, metrics []string
	for _, r := range rows {
		if g := groupName(r); !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
		if !slices.Contains(metrics, r.Metric) {
			metrics = append(metrics, r.Metric)
		}
	}
	bars := vg.Length(barThickness * len(metrics)) // a group's

	f := newFigure(title)
	groupHeight := bars + groupNameHeight + groupGap
	f.width, f.height = lineWidth, 70+groupHeight*vg.Length(len(groups)) // 70: the title and the value axis
	p := f.plot
	// The first group on top.
	position := func(g string) float64 { return float64(len(groups) - 1 - slices.Index(groups, g)) }
	p.Y.Tick.Marker = plot.ConstantTicks(nil) // the groups are named above their bars
	p.Y.Min, p.Y.Max = -0.5, float64(len(groups))-0.5
	p.X.Padding, p.Y.Padding = 0, 0 // the bars start on the axis
	valueAxis(&p.X, unit, values(rows))
	grid := plotter.NewGrid()
	grid.Horizontal.Color = nil
	p.Add(grid)

	for mi, m := range metrics {
		// The first metric's bar on top of its group.
		offset := (vg.Length(len(metrics)-1)/2 - vg.Length(mi)) * barThickness
		var labelled plotter.XYLabels
		var first *plotter.BarChart
		for _, r := range rows {
			if r.Metric != m {
				continue
			}
			bar, _ := plotter.NewBarChart(plotter.Values{r.Value}, barThickness-1) // cannot fail: the value is finite
			bar.Horizontal, bar.XMin, bar.Offset = true, position(groupName(r)), offset
			bar.Color, bar.LineStyle.Width = palette[mi%len(palette)], 0
			p.Add(bar)
			first = cmp.Or(first, bar)
			labelled.XYs = append(labelled.XYs, plotter.XY{X: r.Value, Y: position(groupName(r))})
			labelled.Labels = append(labelled.Labels, num(r.Value))
		}
		p.Add(labels(labelled, labelSize, vg.Point{X: 3, Y: offset}, draw.YCenter, rgb(0x333333)))
		f.legend.Add(m, first)
	}
	var names plotter.XYLabels
	for _, g := range groups {
		names.XYs = append(names.XYs, plotter.XY{X: 0, Y: position(g)})
		names.Labels = append(names.Labels, g)
	}
	p.Add(labels(names, 10, vg.Point{X: 2, Y: bars/2 + 2}, draw.YBottom, color.Black))
	return f
}

// labels writes texts at points, offset by offset, aligned vertically by
// align.
func labels(texts plotter.XYLabels, size vg.Length, offset vg.Point, align draw.YAlignment, c color.Color) *plotter.Labels {
	l, _ := plotter.NewLabels(texts) // cannot fail: as many texts as points
	for i := range l.TextStyle {
		l.TextStyle[i].Font.Size = size
		l.TextStyle[i].YAlign = align
		l.TextStyle[i].Color = c
	}
	l.Offset = offset
	return l
}

// groupName names a group of bars on one line.
func groupName(r Row) string {
	return fmt.Sprintf("%s, %s, %s", r.Series, plural(r.Instances, "instance"), plural(r.Clients, "client"))
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// valueAxis makes a an axis of values in unit, from zero to a round number
// at or above every value (see axis).
func valueAxis(a *plot.Axis, unit string, values []float64) {
	top, ticks := axis(values)
	a.Label.Text = unit
	a.Min, a.Max = 0, top
	marks := make(plot.ConstantTicks, len(ticks))
	for i, t := range ticks {
		marks[i] = plot.Tick{Value: t, Label: num(t)}
	}
	a.Tick.Marker = marks
}

// axis returns the top of the value axis, a round number at or above every
// value, and its ticks from zero: a step of 1, 2 or 5 times a power of ten
// giving at most 6 ticks.
func axis(values []float64) (float64, []float64) {
	hi := 0.0
	for _, v := range values {
		hi = max(hi, v)
	}
	if hi <= 0 {
		hi = 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(hi/5)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; hi/step <= 5 {
			break
		}
	}
	top := math.Ceil(hi/step) * step
	if step == 0 || math.IsInf(top, 0) {
		// Near the ends of float64 (hi/5 is zero, or the round number above
		// hi overflows): the axis ends at hi itself.
		return hi, []float64{0, hi}
	}
	n := int(math.Round(top / step))
	ticks := make([]float64, n+1)
	for i := range n {
		ticks[i] = float64(i) * step
	}
	ticks[n] = top
	return top, ticks
}

func values(rows []Row) []float64 {
	vs := make([]float64, len(rows))
	for i, r := range rows {
		vs[i] = r.Value
	}
	return vs
}

var english = message.NewPrinter(language.English)

// num formats a value as the charts write it: thousands grouped, to a tenth
// from 10 up, to a thousandth below (the load tool writes milliseconds to
// the microsecond).
func num(v float64) string {
	digits := 3
	if math.Abs(v) >= 10 {
		digits = 1
	}
	return english.Sprint(number.Decimal(v, number.MaxFractionDigits(digits)))
}
