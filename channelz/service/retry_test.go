package service_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/rdmarpc/rdmarpc/channelz"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// flaky fails each method's first call Unavailable and answers the others.
type flaky struct{ unary, stream atomic.Int64 }

var flakyDesc = rpc.ServiceDesc{
	ServiceName: "t.Flaky",
	HandlerType: (*any)(nil),
	Methods: []rpc.MethodDesc{{
		MethodName: "U",
		Handler: func(srv any, _ context.Context, dec func(any) error, _ rpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(emptypb.Empty)); err != nil {
				return nil, err
			}
			if srv.(*flaky).unary.Add(1) == 1 {
				return nil, status.Error(codes.Unavailable, "first")
			}
			return new(emptypb.Empty), nil
		},
	}},
	Streams: []rpc.StreamDesc{{
		StreamName:    "S",
		ServerStreams: true,
		Handler: func(srv any, ss rpc.ServerStream) error {
			if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			if srv.(*flaky).stream.Add(1) == 1 {
				return status.Error(codes.Unavailable, "first")
			}
			return ss.SendMsg(new(emptypb.Empty))
		},
	}},
}

// TestRetriesCountOnce: with a retry policy, a call that succeeds on its
// second attempt is one call on the channel, and two (one failed) on the
// subchannel and its socket; so for a unary call and a stream.
func TestRetriesCountOnce(t *testing.T) {
	srv := rpc.NewServer()
	srv.RegisterService(&flakyDesc, new(flaky))
	target := "tcp://" + serve(t, srv)
	cc, err := rpc.NewClient(target, rpc.WithDefaultServiceConfig(`{"methodConfig": [{
		"name": [{"service": "t.Flaky"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.01s",
		                "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := testCtx(t)
	if err := cc.Invoke(ctx, "/t.Flaky/U", new(emptypb.Empty), new(emptypb.Empty)); err != nil {
		t.Fatalf("unary: %v", err)
	}
	cs, err := cc.NewStream(ctx, &flakyDesc.Streams[0], "/t.Flaky/S")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(new(emptypb.Empty)); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(emptypb.Empty)); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if err := cs.RecvMsg(new(emptypb.Empty)); err != io.EOF {
		t.Fatalf("stream's end: %v", err)
	}

	var ch *channelz.Channel
	chs, _ := channelz.TopChannels(0, 1000)
	for _, c := range chs {
		if c.Target() == target {
			ch = c
		}
	}
	if ch == nil || len(ch.SubChannels()) != 1 || len(ch.SubChannels()[0].Sockets()) != 1 {
		t.Fatalf("no channel with one subchannel and one socket for %s", target)
	}
	c := ch.Calls.Counts()
	wantCalls(t, "channel", 2, 2, 0, c.Started, c.Succeeded, c.Failed)
	sc := ch.SubChannels()[0]
	s := sc.Calls.Counts()
	wantCalls(t, "subchannel", 4, 2, 2, s.Started, s.Succeeded, s.Failed)
	m := sc.Sockets()[0].Metrics()
	wantCalls(t, "socket", 4, 2, 2, m.StreamsStarted, m.StreamsSucceeded, m.StreamsFailed)
}
