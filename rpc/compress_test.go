package rpc_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/encoding"
	_ "github.com/rdmarpc/rdmarpc/encoding/gzip"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// encodingService answers Metadata with the request's grpc-encoding and
// grpc-accept-encoding, as its handler saw them, as response headers, and Echo as gate does.
type encodingService struct{ *gate }

func (*encodingService) Metadata(ctx context.Context, in *testpb.MetadataRequest) (*testpb.MetadataResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	echo := metadata.MD{}
	for _, k := range []string{"grpc-encoding", "grpc-accept-encoding"} {
		if v, ok := md[k]; ok {
			echo[k] = v
		}
	}
	return &testpb.MetadataResponse{}, rpc.SetHeader(ctx, echo)
}

// TestCompressUnary: a call with UseCompressor("gzip") compresses its
// request and the server answers compressed: 1 MiB of zeros each way
// passes send limits of 64 KiB on both sides, which the same call without
// a compressor does not; the encoding's name reaches neither the handler
// nor the caller's headers.
func TestCompressUnary(t *testing.T) {
	s := startServer(t, pipe.New(pipe.Options{}), &encodingService{gate: newGate()}, rpc.MaxSendMsgSize(64<<10))
	_, c := s.dial(t)
	ctx := testCtx(t)
	req := &testpb.EchoRequest{Payload: make([]byte, 1<<20)}
	if _, err := c.Echo(ctx, req, rpc.MaxCallSendMsgSize(64<<10)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("1 MiB request uncompressed under a 64 KiB send limit: %v, want ResourceExhausted", err)
	}
	if _, err := c.Echo(ctx, &testpb.EchoRequest{ReplySize: 1 << 20}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("1 MiB response uncompressed under the server's 64 KiB send limit: %v, want ResourceExhausted", err)
	}
	var header metadata.MD
	resp, err := c.Echo(ctx, req, rpc.MaxCallSendMsgSize(64<<10), rpc.UseCompressor("gzip"), rpc.Header(&header))
	if err != nil || len(resp.GetPayload()) != 1<<20 {
		t.Fatalf("compressed echo of 1 MiB: %d bytes, %v", len(resp.GetPayload()), err)
	}
	if v := header.Get("grpc-encoding"); len(v) != 0 {
		t.Errorf("response headers show grpc-encoding %q", v)
	}
	if _, err := c.Metadata(ctx, &testpb.MetadataRequest{}, rpc.UseCompressor("gzip"), rpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if v := header.Get("grpc-encoding"); len(v) != 0 {
		t.Errorf("the handler saw grpc-encoding %q in its metadata", v)
	}
	// The client advertises every compressor registered in the process
	// (TestCompressBomb registers one more when it runs first).
	if v := header.Get("grpc-accept-encoding"); len(v) != 1 || !slices.Contains(strings.Split(v[0], ","), "gzip") {
		t.Errorf("the handler saw grpc-accept-encoding %q, want one value naming gzip", v)
	}
	if _, err := c.Echo(ctx, &testpb.EchoRequest{ReplySize: 1 << 20}, rpc.UseCompressor("identity")); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("identity: %v, want ResourceExhausted as uncompressed", err)
	}
}

// TestCompressUnknown: a compressor the client does not have fails the
// call Internal before it leaves; one the server does not have,
// Unimplemented, on unary calls and streams, as gRPC-go's.
func TestCompressUnknown(t *testing.T) {
	s := startServerWith(t, pipe.New(pipe.Options{}), newGate(), registerEchoStream)
	cc, c := s.dial(t)
	ctx := testCtx(t)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}, rpc.UseCompressor("snappy")); status.Code(err) != codes.Internal {
		t.Errorf("UseCompressor(snappy) on the client: %v, want Internal", err)
	}
	sctx := metadata.AppendToOutgoingContext(ctx, "grpc-encoding", "snappy")
	if _, err := c.Echo(sctx, &testpb.EchoRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("a request in snappy to the server: %v, want Unimplemented", err)
	}
	cs, err := cc.NewStream(sctx, &rpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/t.Burst/Echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Unimplemented {
		t.Errorf("a stream in snappy to the server: %v, want Unimplemented", err)
	}
	if _, err := cc.NewStream(ctx, &rpc.StreamDesc{ServerStreams: true}, "/t.Burst/Echo", rpc.UseCompressor("snappy")); status.Code(err) != codes.Internal {
		t.Errorf("UseCompressor(snappy) on a client stream: %v, want Internal", err)
	}
}

func registerEchoStream(s *rpc.Server) {
	s.RegisterService(echoStreamService(new(concurrency)), struct{}{})
}

// TestCompressStream: a bidirectional stream with UseCompressor("gzip")
// sends and receives compressed messages (1 MiB of zeros under 64 KiB send
// limits both ways).
func TestCompressStream(t *testing.T) {
	s := startServerWith(t, pipe.New(pipe.Options{}), newGate(), registerEchoStream, rpc.MaxSendMsgSize(64<<10))
	cc, _ := s.dial(t)
	ctx := testCtx(t)
	desc := &rpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	cs, err := cc.NewStream(ctx, desc, "/t.Burst/Echo", rpc.UseCompressor("gzip"), rpc.MaxCallSendMsgSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		msg := wrapperspb.String(string(bytes.Repeat([]byte{'a' + byte(i)}, 1<<20)))
		if err := cs.SendMsg(msg); err != nil {
			t.Fatalf("message %d: SendMsg: %v", i, err)
		}
		got := new(wrapperspb.StringValue)
		if err := cs.RecvMsg(got); err != nil || got.Value != msg.Value {
			t.Fatalf("message %d: RecvMsg: %d bytes, %v", i, len(got.Value), err)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	if md, _ := cs.Header(); len(md.Get("grpc-encoding")) != 0 {
		t.Errorf("stream headers show grpc-encoding %q", md.Get("grpc-encoding"))
	}
}

// bombCompressor "compresses" every message into the same gzip stream,
// made beforehand: a few KiB that inflate to many MiB.
type bombCompressor struct{ bomb []byte }

func (b bombCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	return nopCloser{w, b.bomb}, nil
}

func (b bombCompressor) Decompress(r io.Reader) (io.Reader, error) {
	return encoding.GetCompressor("gzip").Decompress(r)
}

func (bombCompressor) Name() string { return "bomb" }

type nopCloser struct {
	w    io.Writer
	bomb []byte
}

func (n nopCloser) Write(p []byte) (int, error) { return len(p), nil }
func (n nopCloser) Close() error {
	_, err := n.w.Write(n.bomb)
	return err
}

// TestCompressBomb: a request that inflates to 64 MiB, to a server that
// takes 1 MiB messages, fails ResourceExhausted, and the server allocated
// a small part of the 64 MiB on the way (the decompressor is read only up
// to the limit).
func TestCompressBomb(t *testing.T) {
	const inflated = 64 << 20
	// A gzip stream may be several members one after another: one that
	// inflates to 1 MiB, repeated.
	var member bytes.Buffer
	w, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	w.Write(make([]byte, 1<<20))
	w.Close()
	bomb := bytes.NewBuffer(bytes.Repeat(member.Bytes(), inflated>>20))
	encoding.RegisterCompressor(bombCompressor{bomb.Bytes()})

	s := startServer(t, pipe.New(pipe.Options{}), newGate(), rpc.MaxRecvMsgSize(1<<20))
	_, c := s.dial(t)
	ctx := testCtx(t)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err) // the connection is up before memory is measured
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := c.Echo(ctx, &testpb.EchoRequest{}, rpc.UseCompressor("bomb"))
	runtime.ReadMemStats(&after)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a %d-byte request inflating to %d MiB: %v, want ResourceExhausted", bomb.Len(), inflated>>20, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("the bomb cost %d MiB of allocations, want under 16 (limit 1 MiB, bomb %d MiB)", alloc>>20, inflated>>20)
	}
}

// TestCompressStats: the stats handlers of a compressed call see the
// compressor's name in its headers and, for each message, its encoded
// length and the smaller compressed one.
func TestCompressStats(t *testing.T) {
	rec := newRecorder()
	s := startServer(t, pipe.New(pipe.Options{}), newGate(), rpc.StatsHandler(rec))
	_, c := s.dial(t, rpc.WithStatsHandler(rec))
	req := &testpb.EchoRequest{Payload: make([]byte, 64<<10)}
	if _, err := c.Echo(testCtx(t), req, rpc.UseCompressor("gzip")); err != nil {
		t.Fatal(err)
	}
	const echo = "/rdmarpc.test.v1.Test/Echo"
	for _, key := range []string{"client " + echo, "server " + echo} {
		_, ev := rec.kinds(t, key)
		for _, h := range find[*stats.InHeader](ev) {
			if h.Compression != "gzip" {
				t.Errorf("%s: InHeader.Compression %q, want gzip", key, h.Compression)
			}
		}
		for _, h := range find[*stats.OutHeader](ev) {
			if h.Compression != "gzip" {
				t.Errorf("%s: OutHeader.Compression %q, want gzip", key, h.Compression)
			}
		}
		in, out := find[*stats.InPayload](ev), find[*stats.OutPayload](ev)
		if len(in) != 1 || len(out) != 1 {
			t.Fatalf("%s: %d InPayload, %d OutPayload", key, len(in), len(out))
		}
		if in[0].Length <= 64<<10 || in[0].CompressedLength >= 8<<10 || out[0].Length <= 64<<10 || out[0].CompressedLength >= 8<<10 {
			t.Errorf("%s: in %d (compressed %d), out %d (compressed %d); want over 64 KiB, compressed under 8 KiB",
				key, in[0].Length, in[0].CompressedLength, out[0].Length, out[0].CompressedLength)
		}
	}
}
