package peers

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// benchOutEnv names the file TestWireBench writes its tables to; without
// it the test does nothing (make bench-grpc sets it).
const benchOutEnv = "PEERS_BENCH_OUT"

// load is one measured run: the calls' latencies and how long it took.
type load struct {
	lat  []time.Duration
	took time.Duration
}

// runLoad makes unary calls of size bytes each way from conc goroutines
// for d, and returns what it measured.
func runLoad(tc testpb.TestServiceClient, size, conc int, d time.Duration) (load, error) {
	req := &testpb.SimpleRequest{ResponseSize: int32(size), Payload: &testpb.Payload{Body: make([]byte, size)}}
	ctx, cancel := context.WithTimeout(context.Background(), d+hangGuard)
	defer cancel()
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			for time.Now().Before(end) {
				t0 := time.Now()
				if _, err := tc.UnaryCall(ctx, req); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return load{all, time.Since(start)}, firstErr
}

// variant is one side of a comparison.
type variant struct {
	name string
	tc   testpb.TestServiceClient
}

// compare runs a and b over the grid, interleaved (a, b, a, b, … rounds
// each cell), so that the machine's load falls on both alike; it returns
// the table's rows.
func compare(t *testing.T, a, b variant, rounds int, d time.Duration) []string {
	var rows []string
	for _, size := range []int{64, 1 << 10, 64 << 10} {
		for _, conc := range []int{1, 16, 64} {
			var la, lb load
			for _, v := range []variant{a, b} { // warm up: connections, pools
				if _, err := runLoad(v.tc, size, conc, d/5); err != nil {
					t.Fatalf("%s, %d B, conc %d: %v", v.name, size, conc, err)
				}
			}
			for range rounds {
				for _, x := range []struct {
					v variant
					l *load
				}{{a, &la}, {b, &lb}} {
					l, err := runLoad(x.v.tc, size, conc, d)
					if err != nil {
						t.Fatalf("%s, %d B, conc %d: %v", x.v.name, size, conc, err)
					}
					x.l.lat = append(x.l.lat, l.lat...)
					x.l.took += l.took
				}
			}
			pa, pb := p50(la.lat), p50(lb.lat)
			ra, rb := float64(len(la.lat))/la.took.Seconds(), float64(len(lb.lat))/lb.took.Seconds()
			rows = append(rows, fmt.Sprintf("| %s | %d | %s | %s | %.2f | %.0f | %.0f | %.2f |",
				sizeName(size), conc, us(pa), us(pb), float64(pa)/float64(pb), ra, rb, ra/rb))
			t.Log(rows[len(rows)-1])
		}
	}
	return rows
}

func p50(l []time.Duration) time.Duration {
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	return l[len(l)/2]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func sizeName(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// TestWireBench measures the gRPC protocol path against gRPC-go, servers
// in processes of their own (issue 21 item 6): gRPC-go's client calling
// rdmarpc's server and gRPC-go's, and rdmarpc's grpc:// client and
// gRPC-go's calling gRPC-go's server; unary calls of 64 B, 1 KiB and
// 64 KiB each way at concurrency 1, 16 and 64; p50 latency and calls/s.
// It writes markdown tables to $PEERS_BENCH_OUT.
func TestWireBench(t *testing.T) {
	out := os.Getenv(benchOutEnv)
	if out == "" {
		t.Skip("set " + benchOutEnv + " (make bench-grpc)")
	}
	rounds, d := 3, time.Second
	if v := os.Getenv("PEERS_BENCH_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	rdm := startServer(t, false)
	ref := startCmd(t, "grpcgoserver", nil, false)
	dialGo := func(addr string) testpb.TestServiceClient {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return testpb.NewTestServiceClient(cc)
	}
	rcc, err := rpc.NewClient("grpc://"+ref.tcp, rpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rcc.Close() })

	var b strings.Builder
	head := func(title, a, bn string) {
		fmt.Fprintf(&b, "\n### %s\n\n| size | conc | p50 %s | p50 %s | ratio | calls/s %s | calls/s %s | ratio |\n|---|---|---|---|---|---|---|---|\n", title, a, bn, a, bn)
	}
	fmt.Fprintf(&b, "Unary calls, request and response of the size each, %d interleaved rounds of %v per cell and side (after a warm-up), GOMAXPROCS %d. Ratios are first/second: p50 below 1 and calls/s above 1 favour the first.\n", rounds, d, runtime.GOMAXPROCS(0))
	head("gRPC-go's client → rdmarpc's server vs → gRPC-go's server", "rdmarpc srv", "gRPC-go srv")
	for _, r := range compare(t, variant{"rdmarpc server", dialGo(rdm.tcp)}, variant{"gRPC-go server", dialGo(ref.tcp)}, rounds, d) {
		fmt.Fprintln(&b, r)
	}
	head("rdmarpc's grpc:// client vs gRPC-go's client → gRPC-go's server", "rdmarpc cli", "gRPC-go cli")
	for _, r := range compare(t, variant{"rdmarpc client", testpb.NewTestServiceClient(grpcgo.NewClient(rcc))}, variant{"gRPC-go client", dialGo(ref.tcp)}, rounds, d) {
		fmt.Fprintln(&b, r)
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
