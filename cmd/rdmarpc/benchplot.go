package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/rdmarpc/rdmarpc/internal/loadgen"
	"github.com/rdmarpc/rdmarpc/internal/plot"
)

// writeLatencyPNG plots the latency distribution as latency against
// percentile, the percentile axis stretched towards the tail (x is
// 1/(1-q): 50% at 2, 99% at 100), so that p99.9 is as readable as p50.
func writeLatencyPNG(path string, s loadgen.Summary, h *loadgen.Histogram) error {
	n := float64(h.Count())
	if n < 2 {
		return fmt.Errorf("--png: %d calls are not a distribution", h.Count())
	}
	var pts []plot.Point
	for k := 3; ; k++ { // x = 10^(k/10): 2, 2.5, 3.2, … up to n
		x := math.Pow(10, float64(k)/10)
		if x > n {
			break
		}
		q := 1 - 1/x
		pts = append(pts, plot.Point{X: x, Y: max(float64(h.Quantile(q))/float64(time.Microsecond), 0.001)})
	}
	var ticks []plot.Tick
	for _, t := range []struct {
		x     float64
		label string
	}{{2, "50%"}, {10, "90%"}, {100, "99%"}, {1000, "99.9%"}, {10000, "99.99%"}, {100000, "99.999%"}} {
		if t.x <= n {
			ticks = append(ticks, plot.Tick{V: t.x, Label: t.label})
		}
	}
	// The histogram: calls per bar, against the bar's middle.
	var bars []plot.Point
	for _, b := range h.Bars(24) {
		if b.Count > 0 {
			mid := float64(b.Lo+b.Hi) / 2 / float64(time.Microsecond)
			bars = append(bars, plot.Point{X: max(mid, 0.001), Y: float64(b.Count)})
		}
	}
	// Ticks at 1-2-5 values, or at decades when those would crowd.
	var barTicks []plot.Tick
	lo, hi := float64(h.Min())/float64(time.Microsecond), float64(h.Max())/float64(time.Microsecond)
	for _, steps := range [][]float64{{1, 2, 5}, {1}} {
		barTicks = barTicks[:0]
		for e := math.Floor(math.Log10(max(lo, 0.001))); e <= math.Ceil(math.Log10(max(hi, 0.001))); e++ {
			for _, m := range steps {
				if v := m * math.Pow(10, e); v >= lo && v <= hi {
					barTicks = append(barTicks, plot.Tick{V: v, Label: plot.Number(v)})
				}
			}
		}
		if len(barTicks) <= 7 {
			break
		}
	}
	fig := plot.Figure{
		Title:  fmt.Sprintf("rdmarpc bench, %d workers, %d connection(s)", s.Concurrency, s.Connections),
		Series: []string{fmt.Sprintf("%s %s: %d calls, %.0f calls/s", s.Target, s.Method, s.Calls, s.CallsPerSec)},
		Panels: []plot.Panel{
			{Title: "latency, µs, by percentile", XLabel: "percentile", XTicks: ticks, Lines: []plot.Line{{Series: 0, Points: pts}}},
			{Title: "calls by latency", XLabel: "latency, µs", XTicks: barTicks, Lines: []plot.Line{{Series: 0, Points: bars}}},
		},
	}
	var buf bytes.Buffer
	if err := fig.WritePNG(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
