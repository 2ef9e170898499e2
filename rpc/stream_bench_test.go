package rpc_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// benchStreams is a service for the benchmarks: Flood sends reply_size
// copies of the request's payload; Ping echoes every message.
var benchStreams = rpc.ServiceDesc{
	ServiceName: "rdmarpc.bench.Streams",
	HandlerType: (*any)(nil),
	Streams: []rpc.StreamDesc{
		{StreamName: "Flood", ServerStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
			in := new(testpb.EchoRequest)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			out := &testpb.EchoResponse{Payload: in.Payload}
			for range in.ReplySize {
				if err := ss.SendMsg(out); err != nil {
					return err
				}
			}
			return nil
		}},
		{StreamName: "Ping", ServerStreams: true, ClientStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
			for {
				in := new(testpb.EchoRequest)
				if err := ss.RecvMsg(in); err != nil {
					if err == io.EOF {
						return nil
					}
					return err
				}
				if err := ss.SendMsg(&testpb.EchoResponse{Payload: in.Payload}); err != nil {
					return err
				}
			}
		}},
	},
}

func benchConn(b *testing.B, tr transport.Transport, addr string) *rpc.ClientConn {
	srv := rpc.NewServer()
	srv.RegisterService(&benchStreams, struct{}{})
	testpb.RegisterTestServer(srv, newGate())
	lis, err := tr.Listen(addr)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	cc, err := rpc.Dial(context.Background(), lis.Addr().String(), rpc.WithTransport(tr))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cc.Close()
		srv.Stop()
		<-done
	})
	return cc
}

var benchTransports = []struct {
	name string
	tr   func() transport.Transport
	addr string
}{
	{"tcp", func() transport.Transport { return tcp.New(tcp.Options{}) }, "127.0.0.1:0"},
	{"pipe", func() transport.Transport { return pipe.New(pipe.Options{}) }, "bench:0"},
}

// BenchmarkStreamFlood: one server stream of b.N messages, received as
// fast as they come (flow control included). msgs/s and MB/s of payload.
func BenchmarkStreamFlood(b *testing.B) {
	for _, tr := range benchTransports {
		for _, size := range []int{64, 64 << 10} {
			b.Run(fmt.Sprintf("transport=%s/size=%d", tr.name, size), func(b *testing.B) {
				cc := benchConn(b, tr.tr(), tr.addr)
				desc := &benchStreams.Streams[0]
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				cs, err := cc.NewStream(context.Background(), desc, "/rdmarpc.bench.Streams/Flood")
				if err != nil {
					b.Fatal(err)
				}
				if err := cs.SendMsg(&testpb.EchoRequest{Payload: make([]byte, size), ReplySize: int64(b.N)}); err != nil {
					b.Fatal(err)
				}
				if err := cs.CloseSend(); err != nil {
					b.Fatal(err)
				}
				m := new(testpb.EchoResponse)
				for i := 0; ; i++ {
					if err := cs.RecvMsg(m); err == io.EOF {
						if i != b.N {
							b.Fatalf("%d messages, want %d", i, b.N)
						}
						break
					} else if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkPingPong: a round trip of 64 B on a bidi stream against a unary
// call of 64 B, on one connection.
func BenchmarkPingPong(b *testing.B) {
	for _, tr := range benchTransports {
		b.Run("transport="+tr.name+"/kind=stream", func(b *testing.B) {
			cc := benchConn(b, tr.tr(), tr.addr)
			cs, err := cc.NewStream(context.Background(), &benchStreams.Streams[1], "/rdmarpc.bench.Streams/Ping")
			if err != nil {
				b.Fatal(err)
			}
			req, resp := &testpb.EchoRequest{Payload: make([]byte, 64)}, new(testpb.EchoResponse)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := cs.SendMsg(req); err != nil {
					b.Fatal(err)
				}
				if err := cs.RecvMsg(resp); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cs.CloseSend()
			if err := cs.RecvMsg(resp); err != io.EOF {
				b.Fatal(err)
			}
		})
		// A unary call made as a degenerate stream (OPEN, MESSAGE,
		// CLOSE_SEND; HEADERS, MESSAGE, TRAILERS), to measure what unary
		// calls would cost on streams.
		b.Run("transport="+tr.name+"/kind=stream-per-call", func(b *testing.B) {
			cc := benchConn(b, tr.tr(), tr.addr)
			desc := &rpc.StreamDesc{ClientStreams: true, ServerStreams: true}
			req, resp := &testpb.EchoRequest{Payload: make([]byte, 64)}, new(testpb.EchoResponse)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				cs, err := cc.NewStream(context.Background(), desc, "/rdmarpc.bench.Streams/Ping")
				if err != nil {
					b.Fatal(err)
				}
				if err := cs.SendMsg(req); err != nil {
					b.Fatal(err)
				}
				if err := cs.CloseSend(); err != nil {
					b.Fatal(err)
				}
				if err := cs.RecvMsg(resp); err != nil {
					b.Fatal(err)
				}
				if err := cs.RecvMsg(resp); err != io.EOF {
					b.Fatal(err)
				}
			}
		})
		b.Run("transport="+tr.name+"/kind=unary", func(b *testing.B) {
			c := testpb.NewTestClient(benchConn(b, tr.tr(), tr.addr))
			req := &testpb.EchoRequest{Payload: make([]byte, 64)}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Echo(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
