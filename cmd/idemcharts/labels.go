package main

// Values written beside the points of a line chart, moved apart where
// lines meet: gonum/plot's plotter.Labels draws each label where it is
// told, so close values (2,600 and 2,583 req/s) would print over each other.

import (
	"cmp"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// pointLabels is a plot.Plotter writing each point's label beside it, in
// the point's colour. Labels of one column (the same x) that would overlap
// are moved apart vertically as little as they can (see spread), and a thin
// line joins a moved label to its point.
type pointLabels struct{ labels []pointLabel }

type pointLabel struct {
	x, y  float64 // the point, in data coordinates
	text  string
	color color.Color
	left  bool // the label goes left of the point, else right
}

var _ plot.Plotter = (*pointLabels)(nil)

func (l *pointLabels) add(p pointLabel) { l.labels = append(l.labels, p) }

// halo is the background of a label, which may lie over a line of the
// middle columns: it keeps the label readable and the line visible.
var halo = color.NRGBA{R: 0xff, G: 0xff, B: 0xff, A: 0xcc}

// Distances from a point to its label, in points.
const (
	labelGap    = 8 // to the label's near edge
	leaderStart = 4 // where a moved label's line starts, past the glyph
)

// Plot implements plot.Plotter.
func (l *pointLabels) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	style := text.Style{Font: font.From(plot.DefaultFont, labelSize), YAlign: draw.YCenter, Handler: p.TextHandler}
	height := style.Rectangle("0").Size().Y
	columns := map[float64][]pointLabel{}
	for _, pl := range l.labels {
		columns[pl.x] = append(columns[pl.x], pl)
	}
	xs := make([]float64, 0, len(columns))
	for x := range columns {
		xs = append(xs, x)
	}
	slices.Sort(xs) // the SVG is the same from run to run
	for _, x := range xs {
		column := columns[x]
		want := make([]vg.Length, len(column))
		for i, pl := range column {
			want[i] = trY(pl.y)
		}
		placed := spread(want, height+1, c.Min.Y+height/2, c.Max.Y-height/2)
		for i, pl := range column {
			sty, dir := style, vg.Length(1)
			sty.Color, sty.XAlign = pl.color, draw.XLeft
			if pl.left {
				sty.XAlign, dir = draw.XRight, -1
			}
			px := trX(pl.x)
			if d := placed[i] - want[i]; d > 0.5 || d < -0.5 {
				c.StrokeLine2(draw.LineStyle{Color: pl.color, Width: 0.5},
					px+dir*leaderStart, want[i], px+dir*(labelGap-1), placed[i])
			}
			at := vg.Point{X: px + dir*labelGap, Y: placed[i]}
			box := sty.Rectangle(pl.text).Add(at)
			c.SetColor(halo)
			c.Fill(box.Path())
			c.FillText(sty, at, pl.text)
		}
	}
}

// spread returns positions for labels that want to be at want (any order),
// in the same order: at least gap apart, the same order bottom to top,
// each run of labels that would overlap centred on the mean of what its
// labels want, and within [lo, hi] when they fit (else from lo up).
func spread(want []vg.Length, gap, lo, hi vg.Length) []vg.Length {
	order := make([]int, len(want))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(want[a], want[b]) })

	// A run is order[first:first+n], placed gap apart from its bottom.
	type run struct {
		first, n int
		sum      vg.Length // of what its labels want
	}
	bottom := func(r run) vg.Length {
		b := r.sum/vg.Length(r.n) - gap*vg.Length(r.n-1)/2
		return max(min(b, hi-gap*vg.Length(r.n-1)), lo)
	}
	var runs []run
	for k, i := range order {
		runs = append(runs, run{first: k, n: 1, sum: want[i]})
		// Merge the last run into the one below while they overlap.
		for len(runs) > 1 {
			below, last := runs[len(runs)-2], runs[len(runs)-1]
			if bottom(below)+gap*vg.Length(below.n) <= bottom(last) {
				break
			}
			runs = append(runs[:len(runs)-2], run{first: below.first, n: below.n + last.n, sum: below.sum + last.sum})
		}
	}
	placed := make([]vg.Length, len(want))
	for _, r := range runs {
		b := bottom(r)
		for j := range r.n {
			placed[order[r.first+j]] = b + gap*vg.Length(j)
		}
	}
	return placed
}
