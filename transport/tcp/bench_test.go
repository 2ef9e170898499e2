package tcp

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkRecv measures one direction of a loopback connection by message
// size: the reader's cost, chunked growth for frames above readChunk
// included.
func BenchmarkRecv(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			tr := New(Options{MaxMessageSize: 8 << 20})
			lis, err := tr.Listen("127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer lis.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			c, err := tr.Dial(ctx, lis.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			srv, err := lis.Accept(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
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
