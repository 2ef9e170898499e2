package plot

import (
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"
)

var palette = color.Palette{
	color.RGBA{0xff, 0xff, 0xff, 0xff}, // background
	color.RGBA{0x20, 0x20, 0x20, 0xff}, // text, axes
	color.RGBA{0xe4, 0xe4, 0xe4, 0xff}, // grid
	color.RGBA{0x80, 0x80, 0x80, 0xff}, // frame
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, // series: blue
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, // orange
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, // green
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, // red
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, // purple
}

const (
	cBackground = iota
	cInk
	cGrid
	cFrame
	cSeries
)

const nSeriesColors = 5

// Sizes of the layout, in pixels.
const (
	panelW, panelH = 290, 200 // one chart, frame included
	marginL        = 52       // room for y tick labels
	marginB        = 34       // x tick labels and the x axis name
	marginT        = 22       // the chart's title
	gapR           = 18
	headH          = 52 // the figure's title and legend
)

// Figure is a grid of charts under a title and a legend of series.
type Figure struct {
	Title string
	// Series names the lines: a line's Series indexes it, and picks its
	// colour and marker, the same in every chart.
	Series []string
	// Columns is the number of charts per row (default: all in one row).
	Columns int
	Panels  []Panel
}

// Panel is one chart: both axes on log scales, y labelled with 1-2-5
// values, x with the ticks given.
type Panel struct {
	Title  string
	XLabel string
	XTicks []Tick // where x is labelled; they also set the x range
	Lines  []Line
}

// Tick is a labelled value on an axis.
type Tick struct {
	V     float64
	Label string
}

// Line is one series' points in a chart, drawn joined in the order given.
type Line struct {
	Series int
	Points []Point
}

// Point is a point of a line; both values must be positive (log scales).
type Point struct{ X, Y float64 }

// Dimensions returns the size in pixels of a figure with rows × cols charts.
func Dimensions(cols, rows int) (w, h int) {
	return cols*(marginL+panelW+gapR) + 10, headH + rows*(marginT+panelH+marginB) + 8
}

// HasGlyph reports whether the font draws r (others print as '?').
func HasGlyph(r rune) bool {
	_, ok := glyphs[r]
	return ok
}

// WritePNG draws the figure and encodes it as PNG to w.
func (f Figure) WritePNG(w io.Writer) error {
	if len(f.Panels) == 0 {
		return errors.New("plot: no charts")
	}
	cols := f.Columns
	if cols <= 0 || cols > len(f.Panels) {
		cols = len(f.Panels)
	}
	rows := (len(f.Panels) + cols - 1) / cols
	cellW, cellH := marginL+panelW+gapR, marginT+panelH+marginB
	wd, ht := Dimensions(cols, rows)
	img := image.NewPaletted(image.Rect(0, 0, wd, ht), palette)

	c := canvas{img}
	c.text(12, 10, f.Title, cInk, 2)
	x := 12
	for i, n := range f.Series {
		col := uint8(cSeries + i%nSeriesColors)
		c.hline(x, x+22, 38, col, 2)
		c.marker(x+11, 38, i, col)
		c.text(x+28, 35, n, cInk, 1)
		x += 28 + len(n)*advance + 24
	}
	for i, p := range f.Panels {
		row, col := i/cols, i%cols
		c.panel(col*cellW+marginL, headH+row*cellH+marginT, p)
	}
	return (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(w, img)
}

type canvas struct{ img *image.Paletted }

func (c canvas) set(x, y int, col uint8) {
	if image.Pt(x, y).In(c.img.Rect) {
		c.img.SetColorIndex(x, y, col)
	}
}

func (c canvas) rect(x0, y0, x1, y1 int, col uint8) {
	for y := y0; y <= y1; y++ {
		for x := x0; x <= x1; x++ {
			c.set(x, y, col)
		}
	}
}

func (c canvas) hline(x0, x1, y int, col uint8, width int) { c.rect(x0, y, x1, y+width-1, col) }
func (c canvas) vline(x, y0, y1 int, col uint8)            { c.rect(x, y0, x, y1, col) }

// segment draws a line two pixels wide (Bresenham, each step a 2×2 dot).
func (c canvas) segment(x0, y0, x1, y1 int, col uint8) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		c.rect(x0, y0, x0+1, y0+1, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

// marker draws series i's mark, a different shape for each, so that lines
// stay apart in grey print too.
func (c canvas) marker(x, y, i int, col uint8) {
	switch i % 3 {
	case 0: // square
		c.rect(x-3, y-3, x+3, y+3, col)
	case 1: // diamond
		for d := -4; d <= 4; d++ {
			c.hline(x-(4-abs(d)), x+(4-abs(d)), y+d, col, 1)
		}
	case 2: // triangle
		for d := 0; d <= 7; d++ {
			c.hline(x-d/2, x+d/2, y-4+d, col, 1)
		}
	}
}

// text draws s with its top-left corner at x, y, each font pixel scale²
// pixels. Characters the font lacks are drawn as '?'.
func (c canvas) text(x, y int, s string, col uint8, scale int) {
	for _, r := range s {
		g, ok := glyphs[r]
		if !ok {
			g = glyphs['?']
		}
		for row := range glyphRows {
			for bit := range glyphW {
				if g[row]&(0x10>>bit) != 0 {
					c.rect(x+bit*scale, y+row*scale, x+bit*scale+scale-1, y+row*scale+scale-1, col)
				}
			}
		}
		x += advance * scale
	}
}

func textWidth(s string) int { return len([]rune(s)) * advance }

// panel draws one chart whose plot area starts at x0, y0: log x across,
// log10 of the figure up.
func (c canvas) panel(x0, y0 int, p Panel) {
	c.text(x0, y0-marginT+6, p.Title, cInk, 1)
	x1, y1 := x0+panelW, y0+panelH

	lo, hi := math.Inf(1), math.Inf(-1)
	xlo, xhi := math.Inf(1), math.Inf(-1)
	for _, l := range p.Lines {
		for _, pt := range l.Points {
			lo, hi = min(lo, pt.Y), max(hi, pt.Y)
			xlo, xhi = min(xlo, math.Log2(pt.X)), max(xhi, math.Log2(pt.X))
		}
	}
	for _, t := range p.XTicks {
		xlo, xhi = min(xlo, math.Log2(t.V)), max(xhi, math.Log2(t.V))
	}
	c.rect(x0, y0, x1, y0, cFrame)
	c.rect(x0, y1, x1, y1, cFrame)
	c.vline(x0, y0, y1, cFrame)
	c.vline(x1, y0, y1, cFrame)
	if math.IsInf(lo, 1) {
		c.text(x0+panelW/2-textWidth("no data")/2, y0+panelH/2, "no data", cFrame, 1)
		return
	}

	// y: a log scale from the 1-2-5 value below the data to the one above,
	// so that both ends are labelled, at least a factor 4 tall.
	ylo, yhi := math.Log10(nice(lo, false)), math.Log10(nice(hi, true))
	if yhi-ylo < math.Log10(4) {
		mid := (ylo + yhi) / 2
		ylo, yhi = mid-math.Log10(2), mid+math.Log10(2)
	}
	ypix := func(v float64) int {
		return y1 - int(math.Round((math.Log10(v)-ylo)/(yhi-ylo)*float64(panelH)))
	}
	for _, t := range yTicks(ylo, yhi) {
		y := ypix(t)
		c.hline(x0+1, x1-1, y, cGrid, 1)
		c.hline(x0-4, x0, y, cFrame, 1)
		label := number(t)
		c.text(x0-7-textWidth(label), y-3, label, cInk, 1)
	}

	// x: log2, the smallest and largest a little inside the frame.
	pad := max((xhi-xlo)*0.08, 0.5)
	xlo, xhi = xlo-pad, xhi+pad
	xpix := func(v float64) int {
		return x0 + int(math.Round((math.Log2(v)-xlo)/(xhi-xlo)*float64(panelW)))
	}
	for _, t := range p.XTicks {
		x := xpix(t.V)
		c.vline(x, y0+1, y1-1, cGrid)
		c.vline(x, y1, y1+4, cFrame)
		c.text(x-textWidth(t.Label)/2, y1+8, t.Label, cInk, 1)
	}
	c.text(x0+panelW/2-textWidth(p.XLabel)/2, y1+21, p.XLabel, cFrame, 1)

	for _, l := range p.Lines {
		col := uint8(cSeries + l.Series%nSeriesColors)
		for i, pt := range l.Points {
			if i > 0 {
				q := l.Points[i-1]
				c.segment(xpix(q.X), ypix(q.Y), xpix(pt.X), ypix(pt.Y), col)
			}
		}
		if len(l.Points) <= 32 { // markers on a dense line would hide it
			for _, pt := range l.Points {
				c.marker(xpix(pt.X), ypix(pt.Y), l.Series, col)
			}
		}
	}
}

// nice returns the 1-2-5 value (…, 0.5, 1, 2, 5, 10, …) just below v, or
// just above it when up.
func nice(v float64, up bool) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	steps := []float64{1, 2, 5, 10}
	if up {
		for _, m := range steps {
			if m*e >= v*0.999 {
				return m * e
			}
		}
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i]*e <= v*1.001 {
			return steps[i] * e
		}
	}
	return e
}

// yTicks returns 1-2-5 values between 10^lo and 10^hi, coarser when they
// would crowd.
func yTicks(lo, hi float64) []float64 {
	for _, steps := range [][]float64{{1, 2, 5}, {1, 3}, {1}} {
		var ts []float64
		for e := math.Floor(lo); e <= math.Ceil(hi); e++ {
			for _, m := range steps {
				v := m * math.Pow(10, e)
				if l := math.Log10(v); l >= lo && l <= hi {
					ts = append(ts, v)
				}
			}
		}
		if len(ts) <= 8 {
			return ts
		}
	}
	var ts []float64 // many decades: every other one
	for e := math.Ceil(lo); e <= hi; e += 2 {
		ts = append(ts, math.Pow(10, e))
	}
	return ts
}

// Number writes a tick value briefly, as the y axes do: 0.5, 20, 500, 2k.
func Number(v float64) string { return number(v) }

// number writes a tick value briefly: 0.5, 20, 500, 2k, 10k, 1M.
func number(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	// Round to 3 significant digits first: 3 × 0.1 is 0.30000000000000004.
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
