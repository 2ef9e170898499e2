package plot

import (
	"bytes"
	"image/png"
	"math"
	"testing"
)

func TestWritePNG(t *testing.T) {
	fig := Figure{Title: "latency", Series: []string{"a", "b"}, Columns: 2}
	for range 3 {
		p := Panel{Title: "p", XLabel: "x", XTicks: []Tick{{1, "1"}, {100, "100"}}}
		for s := range 2 {
			p.Lines = append(p.Lines, Line{Series: s, Points: []Point{{1, 10}, {10, 20 * float64(s+1)}, {100, 400}}})
		}
		fig.Panels = append(fig.Panels, p)
	}
	fig.Panels = append(fig.Panels, Panel{Title: "empty"})
	var buf bytes.Buffer
	if err := fig.WritePNG(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// Four charts, two per row.
	if w, h := Dimensions(2, 2); img.Bounds().Dx() != w || img.Bounds().Dy() != h {
		t.Errorf("image is %v, want %dx%d", img.Bounds(), w, h)
	}
	if err := (Figure{}).WritePNG(&bytes.Buffer{}); err == nil {
		t.Error("a figure without charts was drawn")
	}
}

func TestFontCoversLabels(t *testing.T) {
	for _, r := range "no data 0123456789.kM?" {
		if !HasGlyph(r) {
			t.Errorf("no glyph for %q", r)
		}
	}
}

func TestNumber(t *testing.T) {
	for v, want := range map[float64]string{0.5: "0.5", 3 * 0.1: "0.3", 0.03: "0.03", 2: "2", 500: "500", 5000: "5000", 20000: "20k", 1e6: "1M", 2.5e6: "2.5M"} {
		if got := number(v); got != want {
			t.Errorf("number(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestNice(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		up   bool
		want float64
	}{{25, false, 20}, {25, true, 50}, {259, true, 500}, {259, false, 200}, {100, false, 100}, {100, true, 100},
		{0.7, false, 0.5}, {0.7, true, 1}, {6, true, 10}, {1.5, false, 1}} {
		if got := nice(tc.v, tc.up); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("nice(%v, %v) = %v, want %v", tc.v, tc.up, got, tc.want)
		}
	}
}
