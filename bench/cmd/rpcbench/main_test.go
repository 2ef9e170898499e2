package main

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
)

// raceEnabled: built with -race (race_test.go).
var raceEnabled bool

// mainEnv makes the test binary rpcbench itself (the client --callgrind
// runs again under valgrind).
const mainEnv = "RPCBENCH_TEST_MAIN"

func TestMain(m *testing.M) {
	if impl := os.Getenv(childEnv); impl != "" { // a server process the tests started
		os.Exit(childMain(impl, os.Stdin, os.Stdout))
	}
	if os.Getenv(mainEnv) != "" {
		os.Exit(runMain(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// TestCompare runs a tiny matrix against rdmarpc and every peer with saved
// perftest output, and checks the tables, the CSV and the PNG.
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	td := "../../perftest/testdata/"
	csvPath, pngPath := filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.png")
	var out bytes.Buffer
	err := run([]string{"--compare", "raw,drpc,grpc", "--sizes", "64,1KiB", "--conc", "1,4", "--duration", "50ms", "--warmup", "10ms",
		"--ib-lat", td + "send_lat_all_client.txt", "--ib-bw", td + "send_bw_all_client.txt",
		"--csv", csvPath, "--png", pngPath}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"rdmarpc-tcp / gRPC-go-tcp", "rdmarpc-tcp / drpc-tcp", "rdmarpc-tcp / raw-tcp", "rdmarpc-tcp / raw verbs", "ib_send", "grpc", "1KiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	rs := readCSV(t, csvPath)
	impls := map[string]int{}
	for _, r := range rs {
		impls[r.Impl]++
		// Every server ran in a process of its own, which measured its end.
		if r.Impl != "ib_send" && r.Server == (bench.EndCosts{}) {
			t.Errorf("%s %d B conc %d: no figures from the server's process", r.Impl, r.Size, r.Concurrency)
		}
	}
	// ib_send per size; each of four impls × sizes × concurrencies
	if want := map[string]int{"ib_send": 2, "rdmarpc": 4, "raw": 4, "drpc": 4, "grpc": 4}; !maps.Equal(impls, want) {
		t.Errorf("CSV rows per impl: %v, want %v", impls, want)
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

// TestStreamModes runs the streaming modes against rdmarpc and gRPC (the
// old --compare-grpc flag): each gets its rows and its ratio table, and a
// flood counts messages; the raw peer, unary only, gets unary rows only.
func TestStreamModes(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"--inproc", "--compare-grpc", "--compare", "raw", "--modes", "unary,pingpong,stream", "--sizes", "64", "--conc", "1,2", "--duration", "50ms", "--warmup", "10ms"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"rdmarpc/pingpong-tcp / gRPC-go/pingpong-tcp", "rdmarpc/stream-tcp / gRPC-go/stream-tcp", "rdmarpc-tcp / gRPC-go-tcp", "grpc/stream", "rdmarpc/pingpong",
		"rdmarpc-tcp / raw-tcp", "raw runs unary cells only"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "raw/stream") || strings.Contains(out.String(), "raw/pingpong") {
		t.Errorf("the raw peer got stream rows:\n%s", out.String())
	}
}

// TestLargeMessages: a message above gRPC's default 4 MiB limit (and the
// tcp transport's default) echoes, unary and on a stream, with the server
// in a child process: the limits are raised in both processes.
func TestLargeMessages(t *testing.T) {
	t.Setenv(maxMsgEnv, "")
	var out bytes.Buffer
	err := run([]string{"--modes", "unary,stream", "--sizes", "5MiB", "--conc", "1", "--duration", "50ms", "--warmup", "10ms"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"rdmarpc           tcp    5MiB", "rdmarpc/stream    tcp    5MiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--compare-grpc", "--target", "tcp://127.0.0.1:1"},
		{"--compare", "raw", "--target", "tcp://127.0.0.1:1"},
		{"--compare", "raw,thrift"},
		{"--plot", "x.csv"},
		{"--sizes", "lots"},
		{"--conc", "0"},
		{"--ib-dev", "rxe0", "--ib-lat", "x"},
		{"stray"},
		{"--modes", "bidi"},
		{"--rdma-receive", "mine"},
		{"--rdma-completions", "both"},
		{"--rdma-rendezvous", "some"},
		{"--rdma-rendezvous", "0"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
	if o, err := parseFlags([]string{"--compare", "grpc, raw", "--compare-grpc"}); err != nil || !slices.Equal(o.compare, []string{"grpc", "raw"}) {
		t.Errorf("--compare grpc,raw --compare-grpc: peers %q, %v", o.compare, err)
	}
	if o, err := parseFlags([]string{"--rdma-poll-spin", "-1ns", "--rdma-completions", "shared"}); err != nil || o.rdma.String() != "poll-spin=off receive=default completions=shared" {
		t.Errorf("--rdma-poll-spin -1ns --rdma-completions shared: %s, %v", o.rdma, err)
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

// TestCallgrind counts instructions per call at 64 KiB with client and
// servers under callgrind: every count is what a call costs (rdmarpc and
// raw TCP take 0.1–0.2M), not what valgrind's thread scheduling adds.
// Without --fair-sched=yes a yielding thread kept valgrind's lock while the
// thread it waited for could not run, and cells counted 1.3M–71M.
func TestCallgrind(t *testing.T) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		t.Skip("no valgrind")
	}
	if raceEnabled {
		t.Skip("the race detector multiplies the instructions counted")
	}
	t.Setenv(mainEnv, "1")
	csvPath, dumps := filepath.Join(t.TempDir(), "r.csv"), filepath.Join(t.TempDir(), "dumps")
	var out bytes.Buffer
	if err := run([]string{"--callgrind", "--callgrind-dumps", dumps, "--compare", "raw", "--sizes", "64KiB", "--conc", "1", "--duration", "1s", "--warmup", "500ms", "--csv", csvPath}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	rs := readCSV(t, csvPath)
	if len(rs) != 2 {
		t.Fatalf("%d rows, want rdmarpc's and raw's:\n%s", len(rs), out.String())
	}
	// --callgrind-dumps kept every interval: the client's and each
	// server's two per cell, and their ends.
	for _, pattern := range []string{"client.*.4", "server.*.2"} {
		if m, _ := filepath.Glob(filepath.Join(dumps, pattern)); len(m) == 0 {
			t.Errorf("no dump %s in --callgrind-dumps", pattern)
		}
	}
	for _, r := range rs {
		t.Logf("%s: %.0f / %.0f instructions per call", r.Impl, r.InstrPerCall, r.Server.Instr)
		for end, n := range map[string]float64{"client": r.InstrPerCall, "server": r.Server.Instr} {
			if n <= 0 || n > 600e3 {
				t.Errorf("%s %s: %.0f instructions per 64 KiB call", r.Impl, end, n)
			}
		}
	}
}

func readCSV(t *testing.T, path string) []bench.Result {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := bench.ReadCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// mapKV is the KV service's Batch and Get over a map: what --kv uses of it
// (the kvstore itself is measured in bench/results/kv.md).
type mapKV struct {
	kvpb.UnimplementedKVServer
	mu   sync.Mutex
	m    map[string][]byte
	lose bool // Batch writes nothing
}

func (s *mapKV) Batch(_ context.Context, req *kvpb.BatchRequest) (*kvpb.BatchResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lose {
		return &kvpb.BatchResponse{}, nil
	}
	for _, m := range req.GetMutations() {
		s.m[string(m.GetPut().GetKey())] = m.GetPut().GetValue()
	}
	return &kvpb.BatchResponse{}, nil
}

func (s *mapKV) Get(_ context.Context, req *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[string(req.GetKey())]
	return &kvpb.GetResponse{Found: ok, Value: v}, nil
}

// TestKV runs Get cells against a KV server next to the echo cells: each
// Get finds its key with a value of the cell's size (or the run fails),
// and the ratio table of Get to echo is printed.
func TestKV(t *testing.T) {
	srv, err := bench.StartServer("tcp://127.0.0.1:0") // the echo, and below the KV service on its own server
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	lis, err := transport.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kvs := rpc.NewServer()
	kv := &mapKV{m: map[string][]byte{}}
	kvpb.RegisterKVServer(kvs, kv)
	served := make(chan error, 1)
	go func() { served <- kvs.Serve(lis) }()
	defer func() {
		kvs.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	kvTarget := "tcp://" + lis.Addr().String()
	var out bytes.Buffer
	err = run([]string{"--target", srv.Target(), "--kv", kvTarget, "--sizes", "0,1KiB,64KiB", "--conc", "1,3", "--duration", "50ms", "--warmup", "10ms"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"KV Get (" + kvTarget + ") / rdmarpc echo (" + srv.Target() + ")", "kv-get"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if n := strings.Count(out.String(), "\n  kv-get "); n != 3*2 {
		t.Errorf("%d kv-get progress lines, want one per size and concurrency:\n%s", n, out.String())
	}

	// A Get that does not find what was written fails the run.
	kv.mu.Lock()
	kv.lose, kv.m = true, map[string][]byte{}
	kv.mu.Unlock()
	out.Reset()
	err = run([]string{"--target", srv.Target(), "--kv", kvTarget, "--sizes", "64", "--conc", "1", "--duration", "20ms", "--warmup", "5ms"}, &out)
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("Gets of keys the server lost: %v\n%s", err, out.String())
	}
}
