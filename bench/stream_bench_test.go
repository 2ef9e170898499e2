package bench_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
)

// BenchmarkStream compares rdmarpc over TCP loopback with gRPC-go, both
// servers in this process, on the streaming Echo (bench/stream.go):
//
//   - mode=stream: one stream, a sender sending size-byte messages back to
//     back and a receiver taking their echoes; ns/op is per message echoed,
//     MB/s counts the payload once, msg/s is messages echoed per second.
//   - mode=pingpong: one stream, one message each way at a time; the
//     percentiles are the round trip.
//   - mode=unary: the same round trip as a unary Say, for comparison.
//
// Names are impl=…/mode=…/size=…, so `benchstat -col /impl` sets the two
// side by side. Cells alternate rdmarpc and gRPC.
func BenchmarkStream(b *testing.B) {
	ctx := context.Background()
	ours, theirs := startBoth(b)
	impls := []struct {
		name string
		c    bench.Client
	}{{"rdmarpc", ours}, {"grpc", theirs}}
	cells := []struct {
		mode  string
		sizes []int
	}{
		{"stream", []int{64, 64 << 10}},
		{"pingpong", []int{64}},
		{"unary", []int{64}},
	}
	for _, cell := range cells {
		for _, size := range cell.sizes {
			for _, impl := range impls {
				name := fmt.Sprintf("impl=%s/mode=%s/size=%s", impl.name, cell.mode, bench.SizeName(size))
				b.Run(name, func(b *testing.B) {
					switch cell.mode {
					case "stream":
						benchFlood(b, ctx, impl.c, size)
					case "pingpong":
						benchPingPong(b, ctx, impl.c, size)
					default:
						benchEcho(b, impl.c, size, 1)
					}
				})
			}
		}
	}
}

// benchFlood echoes b.N messages on one stream, sending and receiving at
// once.
func benchFlood(b *testing.B, ctx context.Context, c bench.Client, size int) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.OpenStream(ctx)
	if err != nil {
		b.Fatal(err)
	}
	req := &echopb.SayRequest{Payload: make([]byte, size)}
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	var sendErr error
	wg.Go(func() {
		for range b.N {
			if sendErr = st.Send(req); sendErr != nil {
				return
			}
		}
		sendErr = st.CloseSend()
	})
	n := 0
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			cancel()
			wg.Wait()
			b.Fatal(err)
		}
		if len(resp.GetPayload()) != size {
			b.Fatalf("echo of %d bytes, sent %d", len(resp.GetPayload()), size)
		}
		n++
	}
	elapsed := time.Since(start)
	wg.Wait()
	b.StopTimer()
	if sendErr != nil {
		b.Fatal(sendErr)
	}
	if n != b.N {
		b.Fatalf("%d echoes of %d messages", n, b.N)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "msg/s")
}

// benchPingPong makes b.N round trips on one stream.
func benchPingPong(b *testing.B, ctx context.Context, c bench.Client, size int) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := c.OpenStream(ctx)
	if err != nil {
		b.Fatal(err)
	}
	req := &echopb.SayRequest{Payload: make([]byte, size)}
	lats := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := st.Send(req); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			b.Fatal(err)
		}
		lats[i] = time.Since(t0)
	}
	b.StopTimer()
	st.CloseSend()
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		b.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
	p50, p99, p999 := bench.Percentiles(lats)
	b.ReportMetric(us(p50), "p50-µs")
	b.ReportMetric(us(p99), "p99-µs")
	b.ReportMetric(us(p999), "p999-µs")
}
