package rpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// TestUnsentResponsesBounded: a client that sends requests for large
// responses and never reads. What the server holds in encoded responses
// above the transport stays within MaxUnsentResponseBytes, and the server
// gives the connection up, with one log line, once the client has taken no
// response for ResponseTimeout. (Issue 8 item 4: MaxConcurrentCalls ×
// response size per connection, held as long as the client stayed.)
func TestUnsentResponsesBounded(t *testing.T) {
	const (
		respSize = 256 << 10
		budget   = 1 << 20
		calls    = 32
	)
	tr := newSpy(pipe.New(pipe.Options{MaxBuffered: 64 << 10}))
	s := startServer(t, tr, newGate(), rpc.MaxConcurrentCalls(16),
		rpc.MaxUnsentResponseBytes(budget), rpc.ResponseTimeout(500*time.Millisecond))
	ctx := testCtx(t)
	raw, err := tr.Transport.Dial(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	handshakeAsClient(t, ctx, raw)
	req, _ := proto.Marshal(&testpb.EchoRequest{ReplySize: respSize})
	for id := uint64(1); id <= calls; id++ {
		frame := append(wire.AppendRequestHead(nil, id, 0, testpb.Test_Echo_FullMethodName, nil), req...)
		if err := raw.Send(ctx, frame); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the server to accept the connection", func() bool { return tr.server(0) != nil })
	server := tr.server(0)
	select {
	case <-server.Done():
	case <-ctx.Done():
		t.Fatalf("the server kept a connection whose client reads nothing; it holds %d bytes of encoded responses (peak %d)", server.held.Load(), server.peak.Load())
	}
	peak := server.peak.Load()
	t.Logf("peak of encoded responses held above the transport: %d bytes (bound %d, %d handlers × %d bytes without it)", peak, budget, 16, respSize)
	if peak > budget {
		t.Fatalf("the server held %d bytes of unsent responses for one connection, bound %d", peak, budget)
	}
	waitUntil(t, "the log line", func() bool {
		return s.logs.FilterMessage("closing a connection whose client takes no responses").Len() > 0
	})
	if n := s.logs.FilterMessage("closing a connection whose client takes no responses").Len(); n != 1 {
		t.Fatalf("%d log lines, want 1", n)
	}
	var _ transport.Conn = raw
}

// bigReplies answers Echo with ReplySize bytes, allocated by the handler,
// and counts the handlers that built a reply.
type bigReplies struct {
	testpb.UnimplementedTestServer
	built atomic.Int64
}

func (b *bigReplies) Echo(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	b.built.Add(1)
	return &testpb.EchoResponse{Payload: make([]byte, in.ReplySize)}, nil
}

// TestRunningResponsesBounded: a client that asks for many large responses
// at once and reads none. The server starts only the calls whose
// responses, as their method's estimate says, fit the response budget:
// the handlers that built a response they cannot send stay within the
// budget over the first estimate, not MaxConcurrentCalls of them. (Issue
// 20 item 2: 1 100 Gets of a 1 MiB value on one connection, every one run
// at once, 412–510 MiB.)
func TestRunningResponsesBounded(t *testing.T) {
	const (
		respSize = 256 << 10
		budget   = 1 << 20
		calls    = 200
	)
	svc := new(bigReplies)
	tr := newSpy(pipe.New(pipe.Options{MaxBuffered: 64 << 10}))
	s := startServer(t, tr, svc, rpc.MaxUnsentResponseBytes(budget), rpc.ResponseTimeout(-1))
	ctx := testCtx(t)
	raw, err := tr.Transport.Dial(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	handshakeAsClient(t, ctx, raw)
	req, _ := proto.Marshal(&testpb.EchoRequest{ReplySize: respSize})
	for id := uint64(1); id <= calls; id++ {
		frame := append(wire.AppendRequestHead(nil, id, 0, testpb.Test_Echo_FullMethodName, nil), req...)
		if err := raw.Send(ctx, frame); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the server to read every request", func() bool {
		sc := tr.server(0)
		return sc != nil && sc.received[wire.KindRequest].Load() == calls
	})
	// Every request arrived. The handlers the server started have built
	// their replies, and each reply left or is held (a started call that
	// has not built one yet is still running: wait for it), unless more
	// than the bound are held already.
	bound := int64(budget/initialEstimate + 1)
	server := tr.server(0)
	held := func() int64 { return svc.built.Load() - server.sent[wire.KindResponse].Load() }
	waitUntil(t, "the started calls to build their replies", func() bool {
		return held() > bound || svc.built.Load() > 0 && rpc.RunningCalls(s.srv) == held()
	})
	if n := held(); n > bound {
		t.Fatalf("%d handlers hold a %d-byte reply for a client that reads nothing, budget %d: want at most %d", n, respSize, budget, bound)
	}
}

// initialEstimate is the server's response estimate for a method that has
// answered nothing yet.
const initialEstimate = 64 << 10
