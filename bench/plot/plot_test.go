package plot

import (
	"bytes"
	"image/png"
	"math"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
)

func TestWrite(t *testing.T) {
	var rs []bench.Result
	for _, impl := range []string{"rdmarpc", "grpc"} {
		for _, c := range []int{1, 64} {
			for i, size := range []int{64, 1 << 10, 64 << 10} {
				d := time.Duration(20+i*50+c) * time.Microsecond
				rs = append(rs, bench.Result{Impl: impl, Transport: "tcp", Size: size, Concurrency: c,
					Calls: 1000, Elapsed: time.Second, P50: d, P99: 3 * d, P999: 9 * d})
			}
		}
	}
	rs = append(rs, bench.Result{Impl: "ib_send", Transport: "verbs", Size: 64, P50: 10 * time.Microsecond,
		P99: 20 * time.Microsecond, P999: 30 * time.Microsecond, MBPerSecOverride: 2})

	var buf bytes.Buffer
	if err := Write(&buf, "Echo, test", rs); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	// Two rows (conc 1, 64) of four charts.
	if wantW, wantH := len(metrics)*(marginL+panelW+gapR)+10, headH+2*(marginT+panelH+marginB)+8; b.Dx() != wantW || b.Dy() != wantH {
		t.Errorf("image is %dx%d, want %dx%d", b.Dx(), b.Dy(), wantW, wantH)
	}
	if n := buf.Len(); n > 100<<10 {
		t.Errorf("PNG is %d bytes; keep it small", n)
	}
}

func TestWriteEmpty(t *testing.T) {
	if err := Write(&bytes.Buffer{}, "", nil); err == nil {
		t.Error("Write(no results) succeeded")
	}
}

// TestFontCoversLabels: every character the plot writes itself has a glyph
// (a missing one would print as '?').
func TestFontCoversLabels(t *testing.T) {
	texts := []string{"payload size", "no data", ", conc 0123456789", "64B 1KiB 64KiB 1MiB 0.5 20k 1M",
		"rdmarpc-tcp grpc-tcp ib_send-verbs rdma", "Echo over tcp://127.0.0.1:0, GOMAXPROCS=2"}
	for _, m := range metrics {
		texts = append(texts, m.name)
	}
	for _, s := range texts {
		for _, r := range s {
			if _, ok := glyphs[r]; !ok {
				t.Errorf("no glyph for %q (in %q)", r, s)
			}
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
