package perfchart

import (
	"bytes"
	"cmp"
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
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
// A measurement given twice, or a chart whose rows disagree on the unit, is
// an error.
func Charts(rows []Row) ([]Chart, error) {
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
	var charts []Chart
	for _, c := range []struct {
		file, title string
		rows        []Row
		draw        func(title, unit string, rows []Row) []byte
	}{
		{"performance-throughput.svg", "Throughput against clients", through, lineChart},
		{"performance-replay.svg", "Replay against bare HTTP", replay, lineChart},
		{"performance-wake.svg", "Waiter wake latency after the completing commit", wake, barChart},
	} {
		if len(c.rows) == 0 {
			continue
		}
		unit := c.rows[0].Unit
		for _, r := range c.rows {
			if r.Unit != unit {
				return nil, &ParseError{File: r.File, Line: r.Line, Err: fmt.Errorf("%s: unit %q, but %s of the same chart says %q", c.file, r.Unit, c.rows[0].where(), unit)}
			}
		}
		charts = append(charts, Chart{File: c.file, Title: c.title, SVG: c.draw(c.title, unit, c.rows)})
	}
	return charts, nil
}

// Geometry of every chart, in SVG user units.
const (
	height                 = 420
	left, right, top, foot = 80, 200, 50, 60
	plotW, plotH           = 480, height - top - foot // plotW: at least; bar charts widen
	groupWidth             = 96                       // per group of bars, at least
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// label names a line or a group: the series, with the instance count when
// more than one.
func label(r Row) string {
	if r.Instances == 1 {
		return r.Series
	}
	return fmt.Sprintf("%s ×%d instances", r.Series, r.Instances)
}

// lineChart draws value against clients, one line per series and instance
// count, in the order they first appear; clients are evenly spaced
// categories (4, 16, 64 would crowd a linear axis).
func lineChart(title, unit string, rows []Row) []byte {
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
	step := float64(plotW) / float64(len(clients))
	x := func(c int) float64 { return left + step*(float64(slices.Index(clients, c))+0.5) }
	yMax, ticks := axis(rows)
	y := func(v float64) float64 { return top + plotH - v/yMax*plotH }

	b := svg{plotW: plotW}
	b.open(title)
	b.yAxis(unit, ticks, y)
	for _, c := range clients {
		b.text(x(c), top+plotH+20, "middle", strconv.Itoa(c))
	}
	b.text(left+plotW/2, top+plotH+45, "middle", "clients")
	for i, l := range lines {
		color := palette[i%len(palette)]
		ps := points[l]
		slices.SortFunc(ps, func(a, b Row) int { return cmp.Compare(a.Clients, b.Clients) })
		var coords []string
		for _, p := range ps {
			coords = append(coords, fmt.Sprintf("%.1f,%.1f", x(p.Clients), y(p.Value)))
		}
		fmt.Fprintf(&b.buf, `<polyline class="series" fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(coords, " "))
		for _, p := range ps {
			fmt.Fprintf(&b.buf, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s</title></circle>`+"\n",
				x(p.Clients), y(p.Value), color, esc(fmt.Sprintf("%s, %d clients: %s %s", legendName(l), p.Clients, num(p.Value), unit)))
			b.value(x(p.Clients)+6, y(p.Value)-6, "start", color, num(p.Value))
		}
		b.legend(i, color, legendName(l))
	}
	return b.close()
}

// legendName is a line's label, with the metric when it is not throughput.
func legendName(line string) string {
	name, metric, _ := strings.Cut(line, "\x00")
	if metric == metricThrough {
		return name
	}
	return name + " " + metric
}

// barChart draws one group of bars per series, instance count and client
// count, one bar per metric (p50, p99), metrics in the order they first
// appear.
func barChart(title, unit string, rows []Row) []byte {
	// Groups by series, then instances, then clients.
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Series, b.Series), cmp.Compare(a.Instances, b.Instances), cmp.Compare(a.Clients, b.Clients))
	})
	var groups, metrics []string
	values := map[[2]string]Row{}
	lines := map[string][]string{} // a group's label, one line per dimension
	for _, r := range rows {
		g := fmt.Sprintf("%s, %d clients", label(r), r.Clients)
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
			lines[g] = []string{r.Series, plural(r.Instances, "instance"), plural(r.Clients, "client")}
		}
		if !slices.Contains(metrics, r.Metric) {
			metrics = append(metrics, r.Metric)
		}
		values[[2]string{g, r.Metric}] = r
	}
	yMax, ticks := axis(rows)
	y := func(v float64) float64 { return top + plotH - v/yMax*plotH }
	b := svg{plotW: max(plotW, groupWidth*len(groups))}
	groupW := float64(b.plotW) / float64(len(groups))
	barW := groupW * 0.7 / float64(len(metrics))

	b.open(title)
	b.yAxis(unit, ticks, y)
	for gi, g := range groups {
		x0 := left + groupW*float64(gi) + groupW*0.15
		for i, line := range lines[g] {
			b.text(left+groupW*(float64(gi)+0.5), float64(top+plotH+16+13*i), "middle", line)
		}
		for mi, m := range metrics {
			r, ok := values[[2]string{g, m}]
			if !ok {
				continue
			}
			fmt.Fprintf(&b.buf, `<rect class="series" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n",
				x0+barW*float64(mi), y(r.Value), barW-2, top+plotH-y(r.Value), palette[mi%len(palette)],
				esc(fmt.Sprintf("%s %s: %s %s", g, m, num(r.Value), unit)))
			b.value(x0+barW*(float64(mi)+0.5)-1, y(r.Value)-4, "middle", "#333", num(r.Value))
		}
	}
	for mi, m := range metrics {
		b.legend(mi, palette[mi%len(palette)], m)
	}
	return b.close()
}

// axis returns the top of the value axis, a round number at or above every
// value, and its ticks from zero.
func axis(rows []Row) (float64, []float64) {
	hi := 0.0
	for _, r := range rows {
		hi = max(hi, r.Value)
	}
	if hi <= 0 {
		hi = 1
	}
	// A step of 1, 2 or 5 times a power of ten giving at most 6 ticks.
	mag := math.Pow(10, math.Floor(math.Log10(hi/5)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; hi/step <= 5 {
			break
		}
	}
	top := math.Ceil(hi/step) * step
	var ticks []float64
	for i := 0; float64(i)*step <= top*(1+1e-9); i++ {
		ticks = append(ticks, float64(i)*step)
	}
	return top, ticks
}

// num formats a value without trailing zeros, thousands separated: to a
// tenth from 10 up, to six significant digits below.
func num(v float64) string {
	if math.Abs(v) >= 10 {
		v = math.Round(v*10) / 10
	} else {
		// Six significant digits: 0.6000000000000001, a tick computed as
		// 3 × 0.2, is 0.6.
		v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	whole, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(whole, "-")
	whole = strings.TrimPrefix(whole, "-")
	for i := len(whole) - 3; i > 0; i -= 3 {
		whole = whole[:i] + "," + whole[i:]
	}
	if neg {
		whole = "-" + whole
	}
	if frac != "" {
		return whole + "." + frac
	}
	return whole
}

func esc(s string) string { return html.EscapeString(s) }

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// svg accumulates one chart's markup.
type svg struct {
	buf   bytes.Buffer
	plotW int // the plot's width; the chart adds the margins
}

func (b *svg) open(title string) {
	width := left + b.plotW + right
	fmt.Fprintf(&b.buf, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b.buf, `<title>%s</title>`+"\n", esc(title))
	fmt.Fprintf(&b.buf, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b.buf, `<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", left, esc(title))
}

func (b *svg) yAxis(unit string, ticks []float64, y func(float64) float64) {
	for _, t := range ticks {
		fmt.Fprintf(&b.buf, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, left+b.plotW, y(t), y(t))
		b.text(left-8, y(t)+4, "end", num(t))
	}
	fmt.Fprintf(&b.buf, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", left, left+b.plotW, top+plotH, top+plotH)
	fmt.Fprintf(&b.buf, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", left, left, top, top+plotH)
	fmt.Fprintf(&b.buf, `<text transform="translate(20 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+plotH/2, esc(unit))
}

func (b *svg) text(x, y float64, anchor, s string) {
	fmt.Fprintf(&b.buf, `<text x="%.1f" y="%.1f" text-anchor="%s">%s</text>`+"\n", x, y, anchor, esc(s))
}

// value labels a point or a bar with its number.
func (b *svg) value(x, y float64, anchor, color, s string) {
	fmt.Fprintf(&b.buf, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="10" fill="%s">%s</text>`+"\n", x, y, anchor, color, esc(s))
}

func (b *svg) legend(i int, color, name string) {
	ly := float64(top + 10 + 22*i)
	fmt.Fprintf(&b.buf, `<rect x="%d" y="%.1f" width="14" height="14" fill="%s"/>`+"\n", left+b.plotW+20, ly-11, color)
	b.text(float64(left+b.plotW+40), ly, "start", name)
}

func (b *svg) close() []byte {
	b.buf.WriteString("</svg>\n")
	return b.buf.Bytes()
}
