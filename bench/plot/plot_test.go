package plot

import (
	"bytes"
	"image/png"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/internal/plot"
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
	if wantW, wantH := plot.Dimensions(len(metrics), 2); b.Dx() != wantW || b.Dy() != wantH {
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
			if !plot.HasGlyph(r) {
				t.Errorf("no glyph for %q (in %q)", r, s)
			}
		}
	}
}
