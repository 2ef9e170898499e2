package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
)

// TestReadCSV: rpcbench's rows become rungs (rdmarpc over rdma:// is
// rpc-rdma, ib_send keeps its rate), this command's own cells read back as
// written, and a ladder CSV from before the move (a baseline build's) is
// still read.
func TestReadCSV(t *testing.T) {
	dir := t.TempDir()
	own := []bench.Result{{Impl: "conn", Transport: "rdma", Size: 64, Concurrency: 1, Calls: 1000, Elapsed: time.Second, P50: 20 * time.Microsecond}}
	rpc := []bench.Result{
		{Impl: "rdmarpc", Transport: "rdma", Size: 64, Concurrency: 1, Calls: 500, Elapsed: time.Second, P50: 40 * time.Microsecond},
		{Impl: "ib_send", Transport: "rdma", Size: 64, Concurrency: 1, CallsPerSecOverride: 90000, P50: 5 * time.Microsecond},
	}
	ownPath, rpcPath := filepath.Join(dir, "ladder.csv"), filepath.Join(dir, "rdma.csv")
	if err := writeCSV(ownPath, own); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(rpcPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.WriteCSV(f, rpc); err != nil {
		t.Fatal(err)
	}
	f.Close()
	old := filepath.Join(dir, "old.csv")
	if err := os.WriteFile(old, []byte("rung,size_bytes,concurrency,calls,seconds,calls_per_s,p50_us,p99_us,csw_per_call,wakeups_per_call,cgo_per_call,allocs_per_call,cpu_us_per_call\n"+
		"verbs-busy,64,1,2000,2.000,1000.0,7.0,9.0,0.100,0.00,2.00,0.00,3.00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path      string
		rung      string
		p50       time.Duration
		callsPerS float64
	}{
		{ownPath, "conn", 20 * time.Microsecond, 1000},
		{rpcPath, "rpc-rdma", 40 * time.Microsecond, 500},
		{old, "verbs-busy", 7 * time.Microsecond, 1000},
	} {
		rs, err := readCSV(tc.path, false)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		r, ok := find(rs, tc.rung, 64, 1)
		if !ok {
			t.Fatalf("%s: no %s row in %+v", tc.path, tc.rung, rs)
		}
		if r.P50 != tc.p50 || r.CallsPerSec() != tc.callsPerS {
			t.Errorf("%s: %s p50 %v, %.0f calls/s; want %v, %.0f", tc.path, tc.rung, r.P50, r.CallsPerSec(), tc.p50, tc.callsPerS)
		}
	}
	rs, err := readCSV(rpcPath, false)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := find(rs, "ib_send", 64, 16); !ok || r.CallsPerSec() != 90000 {
		t.Errorf("ib_send: %+v, %v; want its rate under every concurrency", r, ok)
	}
}

// TestSeparateProcesses: the RPC rungs of separate processes and of one
// (--merge-inproc's -1p rows) both join the ladder, the former's costs
// summed over both ends, and the targets of issue 25 are computed from the
// separate processes' rows and the stream flood.
func TestSeparateProcesses(t *testing.T) {
	dir := t.TempDir()
	csvFile := func(name string, rs []bench.Result) string {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := bench.WriteCSV(f, rs); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return p
	}
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	sep := csvFile("rdma.csv", []bench.Result{
		{Impl: "ib_send", Transport: "verbs", Size: 64, CallsPerSecOverride: 40000, P50: us(20)},
		{Impl: "rdmarpc", Transport: "rdma", Size: 64, Concurrency: 1, Calls: 1000, Elapsed: time.Second, P50: us(60),
			VCSWPerCall: 0.5, CPUPerCall: us(30), CgoPerCall: 3, Server: bench.EndCosts{VCSW: 0.25, CPU: us(10), Cgo: 2, Allocs: 4}},
	})
	stream := csvFile("rdma-stream.csv", []bench.Result{
		{Impl: "rdmarpc/stream", Transport: "rdma", Size: 64, Concurrency: 16, Calls: 8000, Elapsed: time.Second},
	})
	inproc := csvFile("rdma-1p.csv", []bench.Result{
		{Impl: "rdmarpc", Transport: "rdma", Size: 64, Concurrency: 1, Calls: 1000, Elapsed: time.Second, P50: us(45)},
	})
	own := filepath.Join(dir, "ladder.csv")
	if err := writeCSV(own, []bench.Result{{Impl: "verbs-busy", Transport: "rdma", Size: 64, Concurrency: 1, Calls: 10, Elapsed: time.Second, P50: us(30)}}); err != nil {
		t.Fatal(err)
	}
	before := csvFile("rdma-stream-before.csv", []bench.Result{
		{Impl: "rdmarpc/stream", Transport: "rdma", Size: 64, Concurrency: 16, Calls: 4000, Elapsed: time.Second},
	})
	var out strings.Builder
	if err := run([]string{"--table-only", "--sizes", "64", "--conc", "1,16", "--merge", own + "," + sep + "," + stream, "--merge-inproc", inproc,
		"--before", before}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nrpc-rdma         64    1       60.0", // then ×below over verbs-busy
		"\nrpc-rdma-1p      64    1       45.0        0.0       1000    0.75    1.00    1.50",
		"0.75     0.00    5.0     4.0     40.0\n", // both ends: vcsw, wakeups, cgo, allocs, cpu
		"target: rpc-rdma 64 B conc 1 p50 / verbs-busy p50: 2.00 (target ≤ 1.5)",
		"target: rpc-rdma 64 B conc 1 p50 / ib_send_lat p50: 3.00 (target ≤ 2)",
		"target: rpc-rdma/stream 64 B flood, 16 stream(s): 8000 msg/s / ib_send_bw 40000 msg/s: 0.20 (target ≥ 0.5)",
		// a flood before and after: calls/s only
		"\nrpc-rdma/stream      64   16         0.0         0.0       -        4000        8000    2.00 ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
