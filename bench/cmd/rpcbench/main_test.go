package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/bench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCompare runs a tiny matrix against both implementations with saved
// perftest output, and checks the tables, the CSV and the PNG.
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	td := "../../perftest/testdata/"
	csvPath, pngPath := filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.png")
	var out bytes.Buffer
	err := run([]string{"--compare-grpc", "--sizes", "64,1KiB", "--conc", "1,4", "--duration", "50ms", "--warmup", "10ms",
		"--ib-lat", td + "send_lat_all_client.txt", "--ib-bw", td + "send_bw_all_client.txt",
		"--csv", csvPath, "--png", pngPath}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"rdmarpc-tcp / gRPC-go-tcp", "rdmarpc-tcp / raw verbs", "ib_send", "grpc", "1KiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := bench.ReadCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2+2*2*2 { // ib_send per size, two impls × sizes × concurrencies
		t.Errorf("CSV has %d rows, want 10", len(rs))
	}
	if st, err := os.Stat(pngPath); err != nil || st.Size() == 0 {
		t.Errorf("PNG: %v", err)
	}

	// --plot redraws from the CSV alone.
	png2 := filepath.Join(dir, "again.png")
	if err := run([]string{"--plot", csvPath, "--png", png2}, &out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(png2); err != nil {
		t.Error(err)
	}
}

// TestStreamModes runs the streaming modes against both implementations:
// each gets its rows and its ratio table, and a flood counts messages.
func TestStreamModes(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"--compare-grpc", "--modes", "unary,pingpong,stream", "--sizes", "64", "--conc", "1,2", "--duration", "50ms", "--warmup", "10ms"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"rdmarpc/pingpong-tcp / gRPC-go/pingpong-tcp", "rdmarpc/stream-tcp / gRPC-go/stream-tcp", "rdmarpc-tcp / gRPC-go-tcp", "grpc/stream", "rdmarpc/pingpong"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--compare-grpc", "--target", "tcp://127.0.0.1:1"},
		{"--plot", "x.csv"},
		{"--sizes", "lots"},
		{"--conc", "0"},
		{"--ib-dev", "rxe0", "--ib-lat", "x"},
		{"stray"},
		{"--modes", "bidi"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
	o, err := parseFlags([]string{"--sizes", "64, 4KiB ,64k", "--conc", "1,64"})
	if err != nil || len(o.sizes) != 3 || o.sizes[1] != 4096 || o.sizes[2] != 65536 || len(o.concs) != 2 {
		t.Errorf("parseFlags = %+v, %v", o, err)
	}
}

func TestPerCall(t *testing.T) {
	var out bytes.Buffer
	perCall(&out, map[string]uint64{"sends_posted": 10, "credit_waits": 3, "conns_opened": 2},
		map[string]uint64{"sends_posted": 410, "credit_waits": 3, "conns_opened": 2, "credit_only_sent": 5}, 200)
	if got := out.String(); !strings.Contains(got, " credit_only_sent=0.025 sends_posted=2\n") || strings.Contains(got, "credit_waits") {
		t.Errorf("perCall printed %q", got)
	}
	out.Reset()
	perCall(&out, map[string]uint64{"a": 1}, map[string]uint64{"a": 1}, 10)
	if out.Len() != 0 {
		t.Errorf("nothing moved, yet perCall printed %q", out.String())
	}
}
