package rpc_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// TestServerRemembersUserAgent: the user-agent is the connection's. A
// request without one is given the last the connection carried, and one
// that carries another changes it for the requests after it (the wire's
// order; docs/wire.md, "Metadata").
func TestServerRemembersUserAgent(t *testing.T) {
	var (
		mu   sync.Mutex
		seen = map[string]string{} // request payload → the handler's user-agent
	)
	tr := pipe.New(pipe.Options{})
	s := startServer(t, tr, newGate(), rpc.UnaryInterceptor(func(ctx context.Context, req any, info *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		seen[string(req.(*testpb.EchoRequest).Payload)] = strings.Join(md.Get("user-agent"), ",")
		mu.Unlock()
		return h(ctx, req)
	}))
	ctx := testCtx(t)
	raw, err := tr.Dial(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	handshakeAsClient(t, ctx, raw)
	sends := []struct {
		payload string
		md      metadata.MD
		want    string
	}{
		{"none yet", nil, ""},
		{"first", metadata.Pairs("user-agent", "a/1"), "a/1"},
		{"after first", nil, "a/1"},
		{"second", metadata.Pairs("user-agent", "b/2", "x", "y"), "b/2"},
		{"after second", metadata.Pairs("x", "y"), "b/2"},
	}
	for i, c := range sends {
		req, _ := proto.Marshal(&testpb.EchoRequest{Payload: []byte(c.payload)})
		frame := append(wire.AppendRequestHead(nil, uint64(i+1), 0, testpb.Test_Echo_FullMethodName, c.md), req...)
		if err := raw.Send(ctx, frame); err != nil {
			t.Fatal(err)
		}
	}
	for range sends {
		b, err := raw.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range sends {
		if got := seen[c.payload]; got != c.want {
			t.Errorf("request %q: the handler saw user-agent %q, want %q", c.payload, got, c.want)
		}
	}
}

// TestClientSendsUserAgentUntilKnown: the client sends its user-agent with
// a connection's calls until one of them succeeded (then the server knows
// it), and never a caller's "user-agent" metadata, as gRPC-go. The server
// here is raw frames: it answers the first call with an error, the others
// with success.
func TestClientSendsUserAgentUntilKnown(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	lis, err := tr.Listen("ua:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx := testCtx(t)
	agents := make(chan string, 8)
	served := make(chan error, 1)
	go func() {
		served <- func() error {
			conn, err := lis.Accept(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			if err := handshakeAsServer(t, ctx, conn, wire.Settings{}); err != nil {
				return err
			}
			for i := 0; i < 4; i++ {
				b, err := conn.Recv(ctx)
				if err != nil {
					return err
				}
				h, body, err := wire.ParseHeader(b.Bytes())
				if err != nil {
					return err
				}
				req, err := wire.ParseRequest(body, wire.DefaultMaxMetadata)
				if err != nil {
					return err
				}
				agents <- strings.Join(req.MD.Get("user-agent"), ",")
				b.Release()
				code := uint32(0)
				if i == 0 {
					code = 13 // Internal: the server may not have read the metadata
				}
				if err := conn.Send(ctx, wire.AppendResponseHead(nil, h.CallID, code, "", nil, nil, nil)); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	cc, err := rpc.Dial(ctx, "pipe://"+lis.Addr().String(), rpc.WithTransport(tr), rpc.WithUserAgent("probe/1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestClient(cc)
	callerUA := metadata.AppendToOutgoingContext(ctx, "user-agent", "caller/0")
	for i, cctx := range []context.Context{ctx, callerUA, ctx, callerUA} {
		_, err := c.Echo(cctx, &testpb.EchoRequest{})
		if (i == 0) != (err != nil) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	ua := "probe/1 rdmarpc-go/" + rpc.Version
	want := []string{ua, ua, "", ""} // the first failed: sent again with the second
	for i, w := range want {
		if got := <-agents; got != w {
			t.Errorf("request %d carried user-agent %q, want %q", i, got, w)
		}
	}
}
