package rpc_test

import (
	"context"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// mdService echoes request metadata into a response header, as the
// conformance suite's Metadata method does.
type mdService struct{ *gate }

func (*mdService) Metadata(ctx context.Context, in *testpb.MetadataRequest) (*testpb.MetadataResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if err := rpc.SetHeader(ctx, metadata.Pairs("echo", strings.Join(md.Get("big"), ""))); err != nil {
		return nil, err
	}
	return &testpb.MetadataResponse{}, nil
}

// TestMetadataLimits: request metadata over the server's
// MaxHeaderListSize and response metadata over the client's fail the call
// with ResourceExhausted; under them they pass.
func TestMetadataLimits(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	s := startServer(t, tr, &mdService{gate: newGate()})
	_, c := s.dial(t)
	ctx := testCtx(t)
	call := func(c testpb.TestClient, valueSize int) error {
		ctx := metadata.AppendToOutgoingContext(ctx, "big", strings.Repeat("x", valueSize))
		_, err := c.Metadata(ctx, &testpb.MetadataRequest{})
		return err
	}
	if err := call(c, 10<<10); err != nil {
		t.Fatalf("10 KiB of request metadata: %v", err)
	}
	if err := call(c, 20<<10); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("20 KiB of request metadata: %v, want ResourceExhausted (limit 16 KiB)", err)
	}
	_, small := s.dial(t, rpc.WithMaxHeaderListSize(4<<10))
	if err := call(small, 3<<10); err != nil {
		t.Fatalf("3 KiB echoed to a client with a 4 KiB limit: %v", err)
	}
	if err := call(small, 10<<10); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("10 KiB echoed to a client with a 4 KiB limit: %v, want ResourceExhausted", err)
	}
}

// TestResponseFrameLimit: the client holds the whole response frame to its
// limits, not only the payload: a 1 MiB status message to a client that
// takes 1 KiB messages fails with ResourceExhausted, undecoded.
func TestResponseFrameLimit(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	lis, err := tr.Listen("bigstatus")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx := testCtx(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := lis.Accept(ctx)
		if err != nil {
			return
		}
		defer c.Close()
		if handshakeAsServer(t, ctx, c, wire.Settings{}) != nil {
			return
		}
		b, err := c.Recv(ctx)
		if err != nil {
			return
		}
		h, _, _ := wire.ParseHeader(b.Bytes())
		b.Release()
		c.Send(ctx, wire.AppendResponseHead(nil, h.CallID, uint32(codes.NotFound), strings.Repeat("m", 1<<20), nil, nil, nil))
		<-c.Done()
	}()
	cc, err := rpc.Dial(ctx, "pipe://bigstatus", rpc.WithTransport(tr), rpc.WithMaxRecvMsgSize(1<<10))
	if err != nil {
		t.Fatal(err)
	}
	_, err = testpb.NewTestClient(cc).Echo(ctx, &testpb.EchoRequest{})
	cc.Close()
	<-done
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("1 MiB response frame to a 1 KiB client: %.200v, want ResourceExhausted", err)
	}
}
