package peers

import (
	"compress/gzip"
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	gcodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	gencoding "google.golang.org/grpc/encoding"
	ggzip "google.golang.org/grpc/encoding/gzip"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	gmetadata "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	gstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
	"github.com/rdmarpc/rdmarpc/encoding"
	_ "github.com/rdmarpc/rdmarpc/encoding/gzip"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// wireStats is a gRPC-go stats handler that records what compression the
// peer named and how large the big messages were on the wire.
type wireStats struct {
	mu       sync.Mutex
	inEnc    []string // InHeader.Compression of each call
	in, out  []sizes  // payloads of 10 KiB or more
	inSmall  int      // payloads under 10 KiB received
	outSmall int
}

type sizes struct{ length, wire int }

func (w *wireStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (w *wireStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (w *wireStats) HandleConn(context.Context, stats.ConnStats) {}
func (w *wireStats) HandleRPC(_ context.Context, s stats.RPCStats) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch s := s.(type) {
	case *stats.InHeader:
		w.inEnc = append(w.inEnc, s.Compression)
	case *stats.InPayload:
		if s.Length < 10<<10 {
			w.inSmall++
		} else {
			w.in = append(w.in, sizes{s.Length, s.CompressedLength})
		}
	case *stats.OutPayload:
		if s.Length < 10<<10 {
			w.outSmall++
		} else {
			w.out = append(w.out, sizes{s.Length, s.CompressedLength})
		}
	}
}

// check: every call's peer named gzip, and the big payloads (all zeros)
// went compressed to under a tenth both ways.
func (w *wireStats) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.inEnc) == 0 {
		t.Error("no call's headers were seen")
	}
	for _, e := range w.inEnc {
		if e != "gzip" {
			t.Errorf("the peer's grpc-encoding was %q, not gzip (all: %q)", e, w.inEnc)
			break
		}
	}
	if len(w.in) == 0 || len(w.out) == 0 {
		t.Errorf("big payloads: %d in, %d out; want some each way", len(w.in), len(w.out))
	}
	for _, dir := range []struct {
		name string
		s    []sizes
	}{{"received", w.in}, {"sent", w.out}} {
		for _, s := range dir.s {
			if s.wire*10 >= s.length {
				t.Errorf("a %s payload of %d bytes was %d bytes on the wire: not compressed", dir.name, s.length, s.wire)
			}
		}
	}
	if w.inSmall == 0 || w.outSmall == 0 {
		t.Errorf("small payloads: %d in, %d out; want the empty call's each way", w.inSmall, w.outSmall)
	}
}

// compressedCalls makes an empty unary call (gRPC-go leaves an empty
// message uncompressed: flag 0 in a gzip call), a large unary call and a
// bidirectional stream of large messages.
func compressedCalls(t *testing.T, tc testpb.TestServiceClient, opts ...grpc.CallOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := tc.EmptyCall(ctx, &testpb.Empty{}, opts...); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	resp, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 314159, Payload: &testpb.Payload{Body: make([]byte, 271828)}}, opts...)
	if err != nil || len(resp.GetPayload().GetBody()) != 314159 {
		t.Fatalf("UnaryCall: %d bytes, %v", len(resp.GetPayload().GetBody()), err)
	}
	st, err := tc.FullDuplexCall(ctx, opts...)
	if err != nil {
		t.Fatalf("FullDuplexCall: %v", err)
	}
	for i := range 3 {
		size := int32(100000 + i)
		if err := st.Send(&testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{Size: size}},
			Payload:            &testpb.Payload{Body: make([]byte, 50000)},
		}); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
		m, err := st.Recv()
		if err != nil || len(m.GetPayload().GetBody()) != int(size) {
			t.Fatalf("Recv %d: %d bytes, %v", i, len(m.GetPayload().GetBody()), err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("the stream ended with %v, not io.EOF", err)
	}
}

// TestServerGRPCGoCompression: gRPC-go's client calls with gzip
// (UseCompressor); rdmarpc's server decompresses and answers gzip.
func TestServerGRPCGoCompression(t *testing.T) {
	ws := new(wireStats)
	s := startServer(t, false)
	cc, err := grpc.NewClient(s.tcp, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(ws))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	compressedCalls(t, testpb.NewTestServiceClient(cc), grpc.UseCompressor(ggzip.Name))
	ws.check(t)
}

// otherGzip is gzip under a name the peer does not know (each test its
// own: gRPC-go's registry is this process's).
type otherGzip struct{ name string }

func (otherGzip) Compress(w io.Writer) (io.WriteCloser, error) { return gzip.NewWriter(w), nil }
func (otherGzip) Decompress(r io.Reader) (io.Reader, error)    { return gzip.NewReader(r) }
func (z otherGzip) Name() string                               { return z.name }

// A compressor the server does not have: Unimplemented, as gRPC-go's
// server answers.
func TestServerGRPCGoUnknownCompressor(t *testing.T) {
	z := otherGzip{"x-peers-client-gzip"}
	gencoding.RegisterCompressor(z)
	cc := dial(t, startServer(t, false).tcp)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	_, err := testpb.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 10}, grpc.UseCompressor(z.Name()))
	if gstatus.Code(err) != gcodes.Unimplemented {
		t.Fatalf("got %v, want Unimplemented", err)
	}
}

// TestClientCompression: rdmarpc's grpc:// client calls gRPC-go's server
// with gzip; the server answers gzip, which the client decompresses.
func TestClientCompression(t *testing.T) {
	ws := new(wireStats)
	addr, _ := grpcgoServer(t, grpc.StatsHandler(ws))
	cc := rdmarpcClient(t, "grpc://"+addr, rpc.WithDefaultCallOptions(rpc.UseCompressor("gzip")))
	compressedCalls(t, testpb.NewTestServiceClient(grpcgo.NewClient(cc)))
	ws.check(t)
}

// A compressor gRPC-go's server does not have: Unimplemented.
func TestClientUnknownCompressor(t *testing.T) {
	z := otherGzip{"x-peers-server-gzip"}
	encoding.RegisterCompressor(z)
	addr, _ := grpcgoServer(t)
	tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+addr, rpc.WithDefaultCallOptions(rpc.UseCompressor(z.Name())))))
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 10})
	if gstatus.Code(err) != gcodes.Unimplemented {
		t.Fatalf("got %v, want Unimplemented", err)
	}
}

// TestServerSetSendCompressor: a handler of rdmarpc's server answers
// gRPC-go's client (which advertises gzip, registered in this process)
// compressed with gzip (SetSendCompressor); the response headers name the
// server's compressors; a compressor the client did not advertise is
// refused.
func TestServerSetSendCompressor(t *testing.T) {
	ws := new(wireStats)
	cc, err := grpc.NewClient(startServer(t, false).tcp, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(ws))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	var header gmetadata.MD
	out := new(wrapperspb.BytesValue)
	err = cc.Invoke(gmetadata.AppendToOutgoingContext(ctx, "x-compressor", "gzip"), "/peers.Details/Compressed", &emptypb.Empty{}, out, grpc.Header(&header))
	if err != nil || len(out.Value) != 64<<10 {
		t.Fatalf("Compressed: %d bytes, %v", len(out.Value), err)
	}
	if v := header.Get("grpc-accept-encoding"); len(v) != 1 || !slices.Contains(strings.Split(v[0], ","), "gzip") {
		t.Errorf("response headers' grpc-accept-encoding %q, want the server's compressors, gzip among them", v)
	}
	ws.mu.Lock()
	inEnc, in := ws.inEnc, ws.in
	ws.mu.Unlock()
	if len(inEnc) != 1 || inEnc[0] != "gzip" || len(in) != 1 || in[0].wire*10 >= in[0].length {
		t.Errorf("the response: grpc-encoding %q, payloads %v: want gzip, to under a tenth", inEnc, in)
	}
	err = cc.Invoke(gmetadata.AppendToOutgoingContext(ctx, "x-compressor", "x-not-advertised"), "/peers.Details/Compressed", &emptypb.Empty{}, out)
	if gstatus.Code(err) != gcodes.FailedPrecondition {
		t.Errorf("a compressor the client did not advertise: %v, want the handler's FailedPrecondition", err)
	}
}
