package main

import (
	"os"
	"path/filepath"
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
		rs, err := readCSV(tc.path)
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
	rs, err := readCSV(rpcPath)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := find(rs, "ib_send", 64, 16); !ok || r.CallsPerSec() != 90000 {
		t.Errorf("ib_send: %+v, %v; want its rate under every concurrency", r, ok)
	}
}
