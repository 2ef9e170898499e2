package bench_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/bench/internal/grpcecho"
	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

var (
	benchSizes = []int{64, 1 << 10, 64 << 10}
	benchConcs = []int{1, 16, 64}
)

// BenchmarkEcho makes unary Echo calls through rdmarpc over TCP loopback and
// through gRPC-go over TCP loopback, both servers in this process, one
// connection per implementation shared by all callers. Names are
// impl=…/size=…/conc=…, so that
//
//	benchstat -col /impl old.txt
//
// puts the two implementations side by side. The cells run size by size,
// rdmarpc and gRPC alternating, so that a noisy neighbour hurts both alike.
//
// Besides ns/op (wall time per call: 1/throughput), B/op and allocs/op
// (client plus server, both in process) and MB/s (payload counted once per
// call), each cell reports the p50, p99 and p99.9 latency of its calls in µs.
func BenchmarkEcho(b *testing.B) {
	ours, theirs := startBoth(b)

	impls := []struct {
		name string
		c    bench.Client
	}{{"rdmarpc", ours}, {"grpc", theirs}}
	for _, size := range benchSizes {
		for _, conc := range benchConcs {
			for _, impl := range impls {
				name := fmt.Sprintf("impl=%s/size=%s/conc=%d", impl.name, bench.SizeName(size), conc)
				b.Run(name, func(b *testing.B) { benchEcho(b, impl.c, size, conc) })
			}
		}
	}
}

// startBoth serves Echo in this process with rdmarpc over TCP loopback
// and with gRPC-go, and returns a client of each; all stop with b.
func startBoth(b *testing.B) (ours, theirs bench.Client) {
	srv, err := bench.StartServer("tcp://127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Stop() })
	if ours, err = bench.Dial(context.Background(), srv.Target()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ours.Close() })
	gsrv, err := grpcecho.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gsrv.Stop() })
	g, err := grpcecho.Dial(gsrv.Addr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	return ours, g
}

// benchEcho makes b.N calls with conc callers and records each call's
// latency in its own slot of one preallocated slice, so that recording
// neither allocates nor contends.
func benchEcho(b *testing.B, c bench.Client, size, conc int) {
	payload := make([]byte, size)
	// One call outside the timer: it connects gRPC's lazy client.
	if _, err := c.Say(context.Background(), &echopb.SayRequest{Payload: payload}); err != nil {
		b.Fatal(err)
	}
	lats := make([]time.Duration, b.N)
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		callErr error
	)
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range conc {
		wg.Go(func() {
			req := &echopb.SayRequest{Payload: payload}
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				resp, err := c.Say(context.Background(), req)
				lats[i] = time.Since(t0)
				if err == nil && len(resp.GetPayload()) != size {
					err = fmt.Errorf("echo returned %d payload bytes, sent %d", len(resp.GetPayload()), size)
				}
				if err != nil {
					errOnce.Do(func() { callErr = err })
					next.Store(int64(b.N)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if callErr != nil {
		b.Fatal(callErr)
	}
	p50, p99, p999 := bench.Percentiles(lats)
	b.ReportMetric(us(p50), "p50-µs")
	b.ReportMetric(us(p99), "p99-µs")
	b.ReportMetric(us(p999), "p999-µs")
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
