package bench_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/bench/internal/grpcecho"
)

func TestQuantile(t *testing.T) {
	var lats []time.Duration
	for i := 1; i <= 1000; i++ {
		lats = append(lats, time.Duration(1001-i)) // reversed: Percentiles sorts
	}
	p50, p99, p999 := bench.Percentiles(lats)
	if p50 != 500 || p99 != 990 || p999 != 999 {
		t.Errorf("Percentiles(1..1000) = %d, %d, %d; want 500, 990, 999", p50, p99, p999)
	}
	for _, tc := range []struct {
		n    int
		q    float64
		want time.Duration
	}{
		{1, 0.5, 1}, {1, 0.999, 1}, {2, 0.5, 1}, {2, 0.99, 2}, {100, 0.99, 99}, {100, 0.999, 100}, {100, 0.5, 50},
	} {
		s := make([]time.Duration, tc.n)
		for i := range s {
			s[i] = time.Duration(i + 1)
		}
		if got := bench.Quantile(s, tc.q); got != tc.want {
			t.Errorf("Quantile(1..%d, %v) = %d, want %d", tc.n, tc.q, got, tc.want)
		}
	}
	if a, b, c := bench.Percentiles(nil); a != 0 || b != 0 || c != 0 {
		t.Errorf("Percentiles(nil) = %v, %v, %v; want zeros", a, b, c)
	}
}

func TestSizes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		name string
	}{{"64", 64, "64B"}, {"64B", 64, "64B"}, {"1KiB", 1024, "1KiB"}, {"1k", 1024, "1KiB"}, {"64KiB", 65536, "64KiB"},
		{"1MiB", 1 << 20, "1MiB"}, {"1500", 1500, "1500B"}, {"0", 0, "0B"}} {
		n, err := bench.ParseSize(tc.in)
		if err != nil || n != tc.n {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, n, err, tc.n)
		}
		if got := bench.SizeName(n); got != tc.name {
			t.Errorf("SizeName(%d) = %q, want %q", n, got, tc.name)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1.5k"} {
		if _, err := bench.ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
}

// TestRun drives both implementations briefly: every call is counted and
// timed, and the CSV of the results reads back as written.
func TestRun(t *testing.T) {
	ctx := context.Background()
	srv, err := bench.StartServer("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ours, err := bench.Dial(ctx, srv.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	gsrv, err := grpcecho.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer gsrv.Stop()
	theirs, err := grpcecho.Dial(gsrv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()

	var rs []bench.Result
	for _, c := range []struct {
		impl string
		cl   bench.Client
	}{{"rdmarpc", ours}, {"grpc", theirs}} {
		r, err := bench.Run(ctx, c.cl, bench.Config{Impl: c.impl, Transport: "tcp", Size: 1024, Concurrency: 4,
			Duration: 100 * time.Millisecond, Warmup: 20 * time.Millisecond})
		if err != nil {
			t.Fatalf("%s: %v", c.impl, err)
		}
		if r.Calls == 0 || r.P50 <= 0 || r.P50 > r.P99 || r.P99 > r.P999 || r.AllocsPerCall <= 0 {
			t.Errorf("%s: implausible result %+v", c.impl, r)
		}
		rs = append(rs, r)
	}

	var buf bytes.Buffer
	if err := bench.WriteCSV(&buf, rs); err != nil {
		t.Fatal(err)
	}
	back, err := bench.ReadCSV(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := bench.WriteCSV(&again, back); err != nil {
		t.Fatal(err)
	}
	if again.String() != buf.String() {
		t.Errorf("CSV round trip changed it:\n%s\nbecame\n%s", buf.String(), again.String())
	}
	ratios := bench.Ratios(rs[:1], rs[1:])
	if len(ratios) != 1 || ratios[0].P50 <= 0 || ratios[0].Throughput <= 0 {
		t.Errorf("Ratios = %+v", ratios)
	}
	var table bytes.Buffer
	bench.WriteTable(&table, rs)
	bench.WriteRatios(&table, "rdmarpc / grpc", ratios, true)
	t.Logf("\n%s", table.String())
}

// TestGRPCStaysInBench guards the rule that gRPC-go is a benchmark baseline
// and the adapter module's reason to be: no package outside bench/,
// contrib/grpcgo (which adapts rdmarpc to gRPC-go's generated code, in a
// module of its own) and test/peers (gRPC-go as a real peer, in a module
// of its own too: go list sees it through go.work) may depend on it, and
// none outside bench/ on bench/.
func TestGRPCStaysInBench(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	out, err := exec.Command("go", "list", "-e", "-deps=false", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "github.com/rdmarpc/rdmarpc/...").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, " ")
		if strings.HasPrefix(pkg, "github.com/rdmarpc/rdmarpc/bench") {
			continue
		}
		adapter := strings.HasPrefix(pkg, "github.com/rdmarpc/rdmarpc/contrib/grpcgo") || strings.HasPrefix(pkg, "github.com/rdmarpc/rdmarpc/test/peers")
		for _, d := range strings.Fields(deps) {
			if (d == "google.golang.org/grpc" && !adapter) || strings.HasPrefix(d, "github.com/rdmarpc/rdmarpc/bench") {
				t.Errorf("%s depends on %s: gRPC and bench/ are for benchmarks only", pkg, d)
			}
		}
	}
}
