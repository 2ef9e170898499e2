package plot

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/internal/plot"
)

type metric struct {
	name string
	get  func(bench.Result) float64
}

var metrics = []metric{
	{"p50 latency, µs", func(r bench.Result) float64 { return us(r.P50) }},
	{"p99 latency, µs", func(r bench.Result) float64 { return us(r.P99) }},
	{"p99.9 latency, µs", func(r bench.Result) float64 { return us(r.P999) }},
	{"throughput, MB/s", func(r bench.Result) float64 { return r.MBPerSec() }},
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// series names a line: the implementation and its transport.
func series(r bench.Result) string { return r.Impl + "-" + r.Transport }

// Write draws rs under title and encodes the figure as PNG to w. Results of
// concurrency 0 (raw verbs, which have no single concurrency) appear in
// every row.
func Write(w io.Writer, title string, rs []bench.Result) error {
	if len(rs) == 0 {
		return fmt.Errorf("plot: no results")
	}
	var names []string
	var concs, sizes []int
	for _, r := range rs {
		if !slices.Contains(names, series(r)) {
			names = append(names, series(r))
		}
		if r.Concurrency != 0 && !slices.Contains(concs, r.Concurrency) {
			concs = append(concs, r.Concurrency)
		}
		if !slices.Contains(sizes, r.Size) {
			sizes = append(sizes, r.Size)
		}
	}
	slices.Sort(concs)
	if len(concs) == 0 {
		concs = []int{0}
	}
	slices.Sort(sizes)
	fig := plot.Figure{Title: title, Series: names, Columns: len(metrics)}
	for _, conc := range concs {
		for _, m := range metrics {
			p := plot.Panel{Title: m.name, XLabel: "payload size"}
			if conc != 0 {
				p.Title += ", conc " + strconv.Itoa(conc)
			}
			var shown []int
			for i, n := range names {
				var pts []plot.Point
				for _, r := range rs {
					if series(r) != n || (r.Concurrency != conc && r.Concurrency != 0) {
						continue
					}
					if v := m.get(r); v > 0 {
						pts = append(pts, plot.Point{X: float64(r.Size), Y: v})
						if !slices.Contains(shown, r.Size) {
							shown = append(shown, r.Size)
						}
					}
				}
				slices.SortFunc(pts, func(a, b plot.Point) int { return cmp.Compare(a.X, b.X) })
				p.Lines = append(p.Lines, plot.Line{Series: i, Points: pts})
			}
			slices.Sort(shown)
			for _, s := range shown {
				p.XTicks = append(p.XTicks, plot.Tick{V: float64(s), Label: bench.SizeName(s)})
			}
			fig.Panels = append(fig.Panels, p)
		}
	}
	return fig.WritePNG(w)
}
