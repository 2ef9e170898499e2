package service_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	channelzpb "github.com/rdmarpc/rdmarpc/channelz/grpc_channelz_v1"
	"github.com/rdmarpc/rdmarpc/channelz/service"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hang bounds every wait that should end promptly; reaching it is a hang,
// not slowness.
const hang = time.Minute

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	t.Cleanup(cancel)
	return ctx
}

// serve starts srv on tcp://127.0.0.1:0 and returns its address; srv
// stops when the test ends, unless it was stopped before.
func serve(t *testing.T, srv *rpc.Server) string {
	t.Helper()
	lis, err := transport.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

func dial(t *testing.T, target string) *rpc.ClientConn {
	t.Helper()
	cc, err := rpc.NewClient(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// channelzClient serves channelz on a server of its own and returns a
// client of it: its own calls are counted apart from those under test.
func channelzClient(t *testing.T) channelzpb.ChannelzClient {
	srv := rpc.NewServer()
	service.RegisterChannelzServiceToServer(srv)
	return channelzpb.NewChannelzClient(dial(t, "tcp://"+serve(t, srv)))
}

// findChannel pages through the top channels (two at a time, to exercise
// paging) for the one with target.
func findChannel(t *testing.T, cz channelzpb.ChannelzClient, target string) *channelzpb.Channel {
	t.Helper()
	var found *channelzpb.Channel
	start := int64(0)
	for {
		resp, err := cz.GetTopChannels(testCtx(t), &channelzpb.GetTopChannelsRequest{StartChannelId: start, MaxResults: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Channel) > 2 {
			t.Fatalf("asked for 2 channels, got %d", len(resp.Channel))
		}
		for _, c := range resp.Channel {
			if c.GetRef().GetChannelId() < start {
				t.Fatalf("channel %d listed from %d", c.GetRef().GetChannelId(), start)
			}
			start = c.GetRef().GetChannelId() + 1
			if c.GetData().GetTarget() == target {
				if found != nil {
					t.Fatalf("two channels for %s", target)
				}
				found = c
			}
		}
		if resp.End {
			return found
		}
		if len(resp.Channel) == 0 {
			t.Fatal("a page with no channels and no end")
		}
	}
}

// findServer returns the server listening on addr.
func findServer(t *testing.T, cz channelzpb.ChannelzClient, addr string) *channelzpb.Server {
	t.Helper()
	resp, err := cz.GetServers(testCtx(t), &channelzpb.GetServersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.End {
		t.Fatal("more than one page of servers")
	}
	_, port, _ := net.SplitHostPort(addr)
	for _, s := range resp.Server {
		for _, ref := range s.ListenSocket {
			ls, err := cz.GetSocket(testCtx(t), &channelzpb.GetSocketRequest{SocketId: ref.SocketId})
			if err != nil {
				t.Fatal(err)
			}
			if p := ls.Socket.GetLocal().GetTcpipAddress().GetPort(); p != 0 && itoa(p) == port {
				return s
			}
		}
	}
	t.Fatalf("no server listens on %s", addr)
	return nil
}

func itoa(p int32) string { return (&net.TCPAddr{Port: int(p)}).String()[1:] }

func wantCalls(t *testing.T, what string, started, succeeded, failed int64, gotStarted, gotSucceeded, gotFailed int64) {
	t.Helper()
	if gotStarted != started || gotSucceeded != succeeded || gotFailed != failed {
		t.Errorf("%s: calls started/succeeded/failed %d/%d/%d, want %d/%d/%d", what, gotStarted, gotSucceeded, gotFailed, started, succeeded, failed)
	}
}

// TestAfterRealCalls makes calls over tcp:// (three that succeed, two that
// fail, a server stream cancelled after its first message) and reads what
// channelz says of the client's channel, subchannel and socket and of the
// server and its socket; then closes both and finds them gone.
func TestAfterRealCalls(t *testing.T) {
	cz := channelzClient(t)
	hs := health.NewServer()
	srv := rpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	addr := serve(t, srv)
	target := "tcp://" + addr
	cc := dial(t, target)
	hc := healthpb.NewHealthClient(cc)
	before := time.Now()
	for range 3 {
		if _, err := hc.Check(testCtx(t), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := hc.Check(testCtx(t), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
			t.Fatalf("Check of an unknown service: %v", err)
		}
	}
	wctx, cancel := context.WithCancel(testCtx(t))
	w, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := w.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("Recv after cancel: %v", err)
	}

	ch := findChannel(t, cz, target)
	if ch == nil {
		t.Fatalf("no channel for %s", target)
	}
	d := ch.GetData()
	wantCalls(t, "channel", 6, 3, 3, d.CallsStarted, d.CallsSucceeded, d.CallsFailed)
	if s := d.GetState().GetState(); s != channelzpb.ChannelConnectivityState_READY {
		t.Errorf("channel state %v, want READY", s)
	}
	if ts := d.GetLastCallStartedTimestamp().AsTime(); ts.Before(before.Add(-time.Second)) {
		t.Errorf("last call started at %v, before the calls (%v)", ts, before)
	}
	if len(ch.SubchannelRef) != 1 {
		t.Fatalf("%d subchannels, want 1", len(ch.SubchannelRef))
	}
	sub, err := cz.GetSubchannel(testCtx(t), &channelzpb.GetSubchannelRequest{SubchannelId: ch.SubchannelRef[0].SubchannelId})
	if err != nil {
		t.Fatal(err)
	}
	sd := sub.Subchannel.GetData()
	wantCalls(t, "subchannel", 6, 3, 3, sd.CallsStarted, sd.CallsSucceeded, sd.CallsFailed)
	if s := sd.GetState().GetState(); s != channelzpb.ChannelConnectivityState_READY {
		t.Errorf("subchannel state %v, want READY", s)
	}
	if len(sub.Subchannel.SocketRef) != 1 {
		t.Fatalf("%d sockets, want 1", len(sub.Subchannel.SocketRef))
	}
	clientSock, err := cz.GetSocket(testCtx(t), &channelzpb.GetSocketRequest{SocketId: sub.Subchannel.SocketRef[0].SocketId})
	if err != nil {
		t.Fatal(err)
	}
	k := clientSock.Socket
	kd := k.GetData()
	wantCalls(t, "client socket streams", 6, 3, 3, kd.StreamsStarted, kd.StreamsSucceeded, kd.StreamsFailed)
	// Five requests and a stream's one; three responses with a message and
	// the stream's first.
	if kd.MessagesSent != 6 || kd.MessagesReceived != 4 {
		t.Errorf("client socket: messages sent/received %d/%d, want 6/4", kd.MessagesSent, kd.MessagesReceived)
	}
	if kd.LastLocalStreamCreatedTimestamp == nil || kd.LastMessageSentTimestamp == nil || kd.LastMessageReceivedTimestamp == nil {
		t.Errorf("client socket: timestamps missing: %v", kd)
	}
	if got := itoa(k.GetRemote().GetTcpipAddress().GetPort()); "127.0.0.1:"+got != addr {
		t.Errorf("client socket's remote port %s, server at %s", got, addr)
	}
	if ip := net.IP(k.GetLocal().GetTcpipAddress().GetIpAddress()); !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("client socket's local address %v", ip)
	}
	if o := kd.GetOption(); len(o) == 0 || o[0].Name != "transport" || o[0].Value != "tcp" {
		t.Errorf("client socket's options %v, want transport tcp first", o)
	}

	// The server sees the stream's cancel when it comes: until then the
	// Watch is running.
	sv := findServer(t, cz, addr)
	for wait := testCtx(t); sv.Data.CallsStarted != sv.Data.CallsSucceeded+sv.Data.CallsFailed; {
		if wait.Err() != nil {
			t.Fatal("the server's Watch never ended")
		}
		time.Sleep(time.Millisecond)
		sv = findServer(t, cz, addr)
	}
	wantCalls(t, "server", 6, 3, 3, sv.Data.CallsStarted, sv.Data.CallsSucceeded, sv.Data.CallsFailed)
	socks, err := cz.GetServerSockets(testCtx(t), &channelzpb.GetServerSocketsRequest{ServerId: sv.Ref.ServerId})
	if err != nil {
		t.Fatal(err)
	}
	if len(socks.SocketRef) != 1 || !socks.End {
		t.Fatalf("server sockets %v, want one, and the end", socks)
	}
	serverSock, err := cz.GetSocket(testCtx(t), &channelzpb.GetSocketRequest{SocketId: socks.SocketRef[0].SocketId})
	if err != nil {
		t.Fatal(err)
	}
	skd := serverSock.Socket.GetData()
	wantCalls(t, "server socket streams", 6, 3, 3, skd.StreamsStarted, skd.StreamsSucceeded, skd.StreamsFailed)
	if skd.LastRemoteStreamCreatedTimestamp == nil || skd.LastLocalStreamCreatedTimestamp != nil {
		t.Errorf("server socket: streams created remote %v, local %v: want remote only", skd.LastRemoteStreamCreatedTimestamp, skd.LastLocalStreamCreatedTimestamp)
	}
	if skd.MessagesReceived != 6 || skd.MessagesSent != 4 {
		t.Errorf("server socket: messages sent/received %d/%d, want 4/6", skd.MessagesSent, skd.MessagesReceived)
	}
	if serverSock.Socket.GetRemote().GetTcpipAddress().GetPort() != k.GetLocal().GetTcpipAddress().GetPort() {
		t.Errorf("server socket's remote %v is not the client's local %v", serverSock.Socket.GetRemote(), k.GetLocal())
	}

	// Closed, they are gone.
	cc.Close()
	for what, err := range map[string]error{
		"channel":       errOf(cz.GetChannel(testCtx(t), &channelzpb.GetChannelRequest{ChannelId: ch.Ref.ChannelId})),
		"subchannel":    errOf(cz.GetSubchannel(testCtx(t), &channelzpb.GetSubchannelRequest{SubchannelId: ch.SubchannelRef[0].SubchannelId})),
		"client socket": errOf(cz.GetSocket(testCtx(t), &channelzpb.GetSocketRequest{SocketId: k.Ref.SocketId})),
	} {
		if status.Code(err) != codes.NotFound {
			t.Errorf("%s after Close: %v, want NotFound", what, err)
		}
	}
	if c := findChannel(t, cz, target); c != nil {
		t.Errorf("closed channel still listed: %v", c)
	}
	srv.Stop()
	if _, err := cz.GetServer(testCtx(t), &channelzpb.GetServerRequest{ServerId: sv.Ref.ServerId}); status.Code(err) != codes.NotFound {
		t.Errorf("server after Stop: %v, want NotFound", err)
	}
	// The server's socket goes once its connection's goroutines end.
	for wait := testCtx(t); ; {
		_, err := cz.GetSocket(wait, &channelzpb.GetSocketRequest{SocketId: serverSock.Socket.Ref.SocketId})
		if status.Code(err) == codes.NotFound {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}

func errOf[T any](_ T, err error) error { return err }

// TestNotFound: ids nothing has are NotFound, as gRPC-go's service says.
func TestNotFound(t *testing.T) {
	cz := channelzClient(t)
	const none = 1 << 62
	for what, err := range map[string]error{
		"channel":        errOf(cz.GetChannel(testCtx(t), &channelzpb.GetChannelRequest{ChannelId: none})),
		"subchannel":     errOf(cz.GetSubchannel(testCtx(t), &channelzpb.GetSubchannelRequest{SubchannelId: none})),
		"socket":         errOf(cz.GetSocket(testCtx(t), &channelzpb.GetSocketRequest{SocketId: none})),
		"server":         errOf(cz.GetServer(testCtx(t), &channelzpb.GetServerRequest{ServerId: none})),
		"server sockets": errOf(cz.GetServerSockets(testCtx(t), &channelzpb.GetServerSocketsRequest{ServerId: none})),
	} {
		if status.Code(err) != codes.NotFound {
			t.Errorf("%s: %v, want NotFound", what, err)
		}
	}
}
