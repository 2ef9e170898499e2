package rdma

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
)

// BenchmarkRendezvous measures, in the test bed's guest, a unary RPC echo
// (testpb Echo over rdma://, both ends in this process) and a flood of
// transport messages one way, at 64 KiB, 1 MiB and 16 MiB, with the
// rendezvous off (fragments), at its default threshold, and for every
// message above one receive buffer (threshold 1). docs/rdma.md,
// "Rendezvous", has the figures.
func BenchmarkRendezvous(b *testing.B) {
	ip := guestIP(b)
	sizes := []int{64 << 10, 1 << 20, 16 << 20}
	for _, cfg := range []struct {
		name string
		thr  int
	}{{"off", -1}, {"default", 0}, {"all", 1}} {
		tr := New(Options{MaxMessageSize: 32 << 20, RendezvousThreshold: cfg.thr})
		b.Run("unary/"+cfg.name, func(b *testing.B) {
			cc, stop := echoServer(b, tr, ip)
			defer stop()
			c := testpb.NewTestClient(cc)
			for _, n := range sizes {
				b.Run(sizeName(n), func(b *testing.B) {
					req := &testpb.EchoRequest{Payload: make([]byte, n)}
					ctx := context.Background()
					if _, err := c.Echo(ctx, req); err != nil { // warm: the connection, the pools
						b.Fatal(err)
					}
					b.SetBytes(int64(n))
					b.ResetTimer()
					for range b.N {
						if _, err := c.Echo(ctx, req); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
		b.Run("flood/"+cfg.name, func(b *testing.B) {
			cli, srv := benchPair(b, tr, ip)
			for _, n := range sizes {
				b.Run(sizeName(n), func(b *testing.B) {
					ctx := context.Background()
					msg := make([]byte, n)
					got := make(chan error, 1)
					go func() {
						for range b.N + 1 {
							m, err := srv.Recv(ctx)
							if err != nil {
								got <- err
								return
							}
							m.Release()
						}
						got <- nil
					}()
					if err := cli.Send(ctx, msg); err != nil {
						b.Fatal(err)
					}
					b.SetBytes(int64(n))
					b.ResetTimer()
					for range b.N {
						if err := cli.Send(ctx, msg); err != nil {
							b.Fatal(err)
						}
					}
					if err := <-got; err != nil {
						b.Fatal(err)
					}
				})
			}
		})
		m := tr.Counters()
		b.Logf("%s: rendezvous sent %d read %d, fragments sent %d", cfg.name, m["rendezvous_sent"], m["rendezvous_read"], m["fragments_sent"])
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// echoServer serves testpb Echo over tr and dials it.
func echoServer(b *testing.B, tr *Transport, ip string) (*rpc.ClientConn, func()) {
	lis, err := tr.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		b.Fatal(err)
	}
	srv := rpc.NewServer(rpc.MaxRecvMsgSize(32 << 20))
	testpb.RegisterTestServer(srv, &quitEcho{quit: make(chan struct{})})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc, err := rpc.Dial(ctx, "rdma://"+lis.Addr().String(), rpc.WithTransport(tr), rpc.WithMaxRecvMsgSize(32<<20))
	if err != nil {
		b.Fatal(err)
	}
	return cc, func() {
		cc.Close()
		srv.Stop()
		<-done
	}
}

// benchPair is pair for a benchmark.
func benchPair(b *testing.B, tr *Transport, ip string) (client, server transport.Conn) {
	c, s, _ := connectPair(b, tr, tr, ip)
	return c, s
}
