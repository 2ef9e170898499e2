package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
)

// TestPrintSweep: bench/rdmasweep.sh's files become one row per cell,
// option set and round, with the echo's p50 over verbs-busy's and
// ib_send_lat's, a flood's rate over ib_send_bw's, and both ends' costs; a
// round without its file says so; without perftest's file the ratios to
// it are left out, not the table.
func TestPrintSweep(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, rs []bench.Result) {
		t.Helper()
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := bench.WriteCSV(f, rs); err != nil {
			t.Fatal(err)
		}
	}
	write("verbs.csv", []bench.Result{{Impl: "verbs-busy", Transport: "rdma", Size: 64, Concurrency: 1, Calls: 1000, Elapsed: time.Second, P50: 100 * time.Microsecond}})
	write("sweep-a-r1.csv", []bench.Result{
		{Impl: "rdmarpc", Transport: "rdma", Size: 64, Concurrency: 1, Calls: 300, Elapsed: time.Second, P50: 300 * time.Microsecond,
			VCSWPerCall: 2, CgoPerCall: 10, CPUPerCall: 50 * time.Microsecond,
			Server: bench.EndCosts{VCSW: 3, Cgo: 11, CPU: 60 * time.Microsecond}},
		{Impl: "rdmarpc/stream", Transport: "rdma", Size: 64, Concurrency: 16, Calls: 2000, Elapsed: time.Second},
	})
	var out bytes.Buffer
	if err := printSweep(&out, dir, []string{"a", "b"}, 1); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"no perftest figures",
		"verbs-busy 64 B conc 1: p50 100.0 µs",
		"rpc-rdma              1 a           1     300.0",
		"   3.00 ", // ×busy
		"2.00+3.00", "10.0+11.0", "50.0+60.0",
		"rpc-rdma              1 b           1 (no figures",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	write("ib.csv", []bench.Result{{Impl: "ib_send", Transport: "rdma", Size: 64, CallsPerSecOverride: 10000, P50: 50 * time.Microsecond}})
	out.Reset()
	if err := printSweep(&out, dir, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ib_send_lat p50 50.0 µs, ib_send_bw 10000 msg/s", "   6.00 ", "  0.200 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("with ib.csv: no %q in\n%s", want, out.String())
		}
	}
}
