package bench_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/bench/internal/rawecho"
)

// BenchmarkPingPong puts rdmarpc's unary echo over tcp:// beside the floor
// under it: a raw TCP ping-pong on loopback in this process (a 4-byte
// length, then the payload, each way; one caller, TCP_NODELAY as Go sets
// it), size by size, raw then rdmarpc back to back. The ratio of their
// p50 is the RPC layer's and the transport's cost over the kernel's.
func BenchmarkPingPong(b *testing.B) {
	srv, err := bench.StartServer("tcp://127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Stop() })
	ours, err := bench.Dial(context.Background(), srv.Target())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ours.Close() })
	raw := startRawEcho(b)
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("impl=rawtcp/size=%s", bench.SizeName(size)), func(b *testing.B) { benchRaw(b, raw, size) })
		b.Run(fmt.Sprintf("impl=rdmarpc/size=%s", bench.SizeName(size)), func(b *testing.B) { benchEcho(b, ours, size, 1) })
	}
}

// startRawEcho serves the raw ping-pong (rpcbench's raw peer) on loopback
// and returns a connection to it; both close with b.
func startRawEcho(b *testing.B) net.Conn {
	srv, err := rawecho.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	c, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		srv.Stop()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		srv.Stop()
	})
	return c
}

// benchRaw makes b.N round trips of size bytes on c, recording each.
func benchRaw(b *testing.B, c net.Conn, size int) {
	out := make([]byte, 4+size)
	binary.BigEndian.PutUint32(out, uint32(size))
	in := make([]byte, 4+size)
	lats := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range lats {
		t0 := time.Now()
		if _, err := c.Write(out); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, in); err != nil {
			b.Fatal(err)
		}
		lats[i] = time.Since(t0)
	}
	b.StopTimer()
	if binary.BigEndian.Uint32(in) != uint32(size) {
		b.Fatal(errors.New("the raw echo returned another length"))
	}
	p50, p99, p999 := bench.Percentiles(lats)
	b.ReportMetric(us(p50), "p50-µs")
	b.ReportMetric(us(p99), "p99-µs")
	b.ReportMetric(us(p999), "p999-µs")
}
