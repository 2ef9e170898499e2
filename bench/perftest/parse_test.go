package perftest

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestParseLat(t *testing.T) {
	for _, tc := range []struct {
		file  string
		n     int    // rows
		first LatRow // rows[0]
	}{
		{"send_lat_64_client.txt", 1, LatRow{Bytes: 64, Iterations: 1000, Min: 12.38, Max: 5246.83, Typical: 13.05, Avg: 89.95, Stdev: 512.33, P99: 3993.13, P999: 5246.83}},
		{"send_lat_64_server.txt", 1, LatRow{Bytes: 64, Iterations: 1000, Min: 12.37, Max: 4055.49, Typical: 13.07, Avg: 88.37, Stdev: 498.96, P99: 3987.38, P999: 4055.49}},
		{"send_lat_all_client.txt", 23, LatRow{Bytes: 2, Iterations: 200, Min: 11.60, Max: 257.72, Typical: 20.79, Avg: 23.84, Stdev: 19.83, P99: 217.02, P999: 257.72}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			rows, err := ParseLat(open(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != tc.n {
				t.Fatalf("%d rows, want %d: %+v", len(rows), tc.n, rows)
			}
			if rows[0] != tc.first {
				t.Errorf("first row\n got %+v\nwant %+v", rows[0], tc.first)
			}
		})
	}

	rows, err := ParseLat(open(t, "send_lat_all_client.txt"))
	if err != nil {
		t.Fatal(err)
	}
	last := rows[len(rows)-1]
	if last.Bytes != 8<<20 || last.Typical != 436494.53 || !math.IsNaN(last.Stdev) || last.P999 != 1111975.22 {
		t.Errorf("last row of -a = %+v; want 8 MiB, typical 436494.53, stdev NaN (\"-nan\"), p99.9 1111975.22", last)
	}
	for i, r := range rows {
		if want := 2 << i; r.Bytes != want {
			t.Errorf("row %d: %d bytes, want %d", i, r.Bytes, want)
		}
	}
}

func TestParseBW(t *testing.T) {
	for _, tc := range []struct {
		file  string
		n     int
		first BWRow
	}{
		{"send_bw_65536_client.txt", 1, BWRow{Bytes: 65536, Iterations: 1000, PeakMiBps: 49.82, AvgMiBps: 34.19, MsgRateMpps: 0.000547}},
		{"send_bw_64_server.txt", 1, BWRow{Bytes: 64, Iterations: 1000, PeakMiBps: 0, AvgMiBps: 0.84, MsgRateMpps: 0.013731}},
		// 20 sizes ran; perftest's complaint about the 21st ("Correlation
		// coefficient … Can't produce a report") is glued to the 20th row.
		{"send_bw_all_client.txt", 20, BWRow{Bytes: 2, Iterations: 200, PeakMiBps: 0.09, AvgMiBps: 0.07, MsgRateMpps: 0.037874}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			rows, err := ParseBW(open(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != tc.n {
				t.Fatalf("%d rows, want %d: %+v", len(rows), tc.n, rows)
			}
			if rows[0] != tc.first {
				t.Errorf("first row\n got %+v\nwant %+v", rows[0], tc.first)
			}
		})
	}
}

// TestGlued: a row with perftest's next message stuck to its last number
// is read whole, and the message does not become a row.
func TestGlued(t *testing.T) {
	rows, err := ParseBW(open(t, "send_bw_all_client.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := BWRow{Bytes: 1 << 20, Iterations: 200, PeakMiBps: 14.11, AvgMiBps: 13.86, MsgRateMpps: 0.000014}
	if last := rows[len(rows)-1]; last != want {
		t.Errorf("last row\n got %+v\nwant %+v", last, want)
	}
	rows, err = ParseBW(open(t, "send_bw_64_client_teardown_failed.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want = BWRow{Bytes: 64, Iterations: 500, PeakMiBps: 2.71, AvgMiBps: 1.18, MsgRateMpps: 0.019278}
	if len(rows) != 1 || rows[0] != want {
		t.Errorf("rows %+v, want [%+v]", rows, want)
	}
}

// TestJoined reads outputs joined by cat: every table counts.
func TestJoined(t *testing.T) {
	var all bytes.Buffer
	for _, f := range []string{"send_lat_64_client.txt", "send_lat_all_client.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	rows, err := ParseLat(&all)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 24 || rows[0].Iterations != 1000 || rows[1].Bytes != 2 {
		t.Errorf("joined outputs: %d rows (want 24), first %+v, second %+v", len(rows), rows[0], rows[1])
	}
}

func TestParseWrongOrNoTable(t *testing.T) {
	if _, err := ParseLat(strings.NewReader("Couldn't connect to 10.9.9.1:18515\nUnable to open file descriptor for socket connection\n")); !errors.Is(err, ErrNoTable) {
		t.Errorf("failed run: err = %v, want ErrNoTable", err)
	}
	// A bandwidth table is not a latency table, and the other way round.
	if _, err := ParseLat(open(t, "send_bw_65536_client.txt")); err == nil || !strings.Contains(err.Error(), "t_min") {
		t.Errorf("ParseLat(bw output) = %v, want a missing-column error", err)
	}
	if _, err := ParseBW(open(t, "send_lat_64_client.txt")); err == nil || !strings.Contains(err.Error(), "BW_peak") {
		t.Errorf("ParseBW(lat output) = %v, want a missing-column error", err)
	}
}

func TestUnits(t *testing.T) {
	if got := RoundTrip(13.05); got != 26100*time.Nanosecond {
		t.Errorf("RoundTrip(13.05 µs) = %v, want 26.1µs", got)
	}
	if got := (BWRow{AvgMiBps: 1}).AvgMBps(); got != 1.048576 {
		t.Errorf("1 MiB/s = %v MB/s, want 1.048576", got)
	}
}

// FuzzParse feeds perturbed perftest output to both parsers: they may refuse
// it, never panic.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.txt")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseLat(bytes.NewReader(b))
		ParseBW(bytes.NewReader(b))
	})
}
