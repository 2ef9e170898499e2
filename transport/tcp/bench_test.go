package tcp

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// benchPair is a connected client and server over loopback.
func benchPair(b *testing.B, o Options) (ctx context.Context, cli, srv transport.Conn) {
	b.Helper()
	tr := New(o)
	lis, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lis.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	cli, err = tr.Dial(ctx, lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	srv, err = lis.Accept(ctx)
	if err != nil {
		cli.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close(); srv.Close() })
	return ctx, cli, srv
}

// BenchmarkRecv measures one direction of a loopback connection by message
// size: the reader's cost, chunked growth for frames above readChunk
// included.
func BenchmarkRecv(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			ctx, c, srv := benchPair(b, Options{MaxMessageSize: 8 << 20})
			msg := make([]byte, size)
			done := make(chan error, 1)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for range b.N {
					if err := c.Send(ctx, msg); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for range b.N {
				m, err := srv.Recv(ctx)
				if err != nil {
					b.Fatal(err)
				}
				m.Release()
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkPingPong is the transport's round trip: conc callers each send a
// message and wait for one back, and the server's one goroutine echoes
// every message it receives. At conc 1 it is what a raw TCP ping-pong
// does, plus the transport; at conc 16 the callers' sends meet in the send
// path, which is where batching (or its absence) shows in CPU per op.
// ns/op is per round trip; p50-µs is a caller's round trip; cpu-µs/op the
// whole process's CPU (both ends) per round trip.
func BenchmarkPingPong(b *testing.B) {
	for _, conc := range []int{1, 16} {
		for _, size := range []int{64, 1 << 10, 64 << 10} {
			b.Run(fmt.Sprintf("conc=%d/size=%d", conc, size), func(b *testing.B) {
				benchPingPong(b, conc, size)
			})
		}
	}
}

func benchPingPong(b *testing.B, conc, size int) {
	ctx, cli, srv := benchPair(b, Options{})
	echoed := make(chan error, 1)
	go func() {
		for {
			m, err := srv.Recv(ctx)
			if err != nil {
				echoed <- nil
				return
			}
			err = srv.Send(ctx, m.Bytes())
			m.Release()
			if err != nil {
				echoed <- err
				return
			}
		}
	}()
	msg := make([]byte, size)
	// Each caller does its share of b.N round trips and records them.
	lat := make([][]time.Duration, conc)
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := range conc {
		n := b.N / conc
		if i < b.N%conc {
			n++
		}
		lat[i] = make([]time.Duration, 0, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				start := time.Now()
				if err := cli.Send(ctx, msg); err != nil {
					errs <- err
					return
				}
				m, err := cli.Recv(ctx)
				if err != nil {
					errs <- err
					return
				}
				m.Release()
				lat[i] = append(lat[i], time.Since(start))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-µs")
	}
	cli.Close()
	if err := <-echoed; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDial is a connection's setup over loopback: dial, both
// handshakes, accept, and both closes. The server reads the client's
// hello before it writes its own (it tells protocols apart by it): this
// is what that could cost.
func BenchmarkDial(b *testing.B) {
	tr := New(Options{})
	lis, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer lis.Close()
	ctx := context.Background()
	addr := lis.Addr().String()
	b.ReportAllocs()
	for b.Loop() {
		c, err := tr.Dial(ctx, addr)
		if err != nil {
			b.Fatal(err)
		}
		s, err := lis.Accept(ctx)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		s.Close()
	}
}
