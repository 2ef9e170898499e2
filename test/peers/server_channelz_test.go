package peers

import (
	"context"
	"net"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	channelzpb "google.golang.org/grpc/channelz/grpc_channelz_v1"
	"google.golang.org/grpc/credentials/insecure"
	gtesting "google.golang.org/grpc/interop/grpc_testing"
)

// TestChannelzFromGRPCGo: gRPC-go's channelz client (its generated
// grpc_channelz_v1 stubs) reads an rdmarpc server's channelz service over
// gRPC's HTTP/2 while gRPC-go's client calls it: the server's call counts
// move by what was called, its listeners are there, and the connection
// shows as an h2 socket with the calls' streams and messages.
func TestChannelzFromGRPCGo(t *testing.T) {
	s := startServer(t, false)
	cc, err := grpc.NewClient(s.tcp, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cz := channelzpb.NewChannelzClient(cc)
	_, port, _ := net.SplitHostPort(s.tcp)

	// The server listening on s.tcp: the only one in the process.
	server := func() *channelzpb.Server {
		t.Helper()
		resp, err := cz.GetServers(ctx, &channelzpb.GetServersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Server) != 1 || !resp.End {
			t.Fatalf("GetServers: %v, want one server", resp)
		}
		return resp.Server[0]
	}
	before := server()
	tc := gtesting.NewTestServiceClient(cc)
	for range 3 {
		if _, err := tc.EmptyCall(ctx, &gtesting.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	after := server()
	// Each GetServers counts itself as started, and the one before as
	// succeeded once it has answered.
	if d := after.Data.CallsStarted - before.Data.CallsStarted; d != 4 {
		t.Errorf("calls started went up by %d, want 4 (3 calls and this GetServers)", d)
	}
	if d := after.Data.CallsSucceeded - before.Data.CallsSucceeded; d != 4 {
		t.Errorf("calls succeeded went up by %d, want 4 (3 calls and the GetServers before)", d)
	}
	if after.Data.CallsFailed != 0 || after.Data.LastCallStartedTimestamp == nil {
		t.Errorf("server data %v: want no failure and a last call", after.Data)
	}

	// Its listeners: tcp on s.tcp, and the unix socket.
	kinds := map[string]bool{}
	for _, ref := range after.ListenSocket {
		ls, err := cz.GetSocket(ctx, &channelzpb.GetSocketRequest{SocketId: ref.SocketId})
		if err != nil {
			t.Fatal(err)
		}
		kind := option(ls.Socket, "transport")
		kinds[kind] = true
		if kind == "tcp" && strconv.Itoa(int(ls.Socket.GetLocal().GetTcpipAddress().GetPort())) != port {
			t.Errorf("tcp listener at %v, want port %s", ls.Socket.GetLocal(), port)
		}
		if kind == "unix" && ls.Socket.GetLocal().GetUdsAddress().GetFilename() == "" {
			t.Errorf("unix listener at %v, want its path", ls.Socket.GetLocal())
		}
	}
	if !kinds["tcp"] || !kinds["unix"] || len(kinds) != 2 {
		t.Errorf("listeners of transports %v, want tcp and unix", kinds)
	}

	socks, err := cz.GetServerSockets(ctx, &channelzpb.GetServerSocketsRequest{ServerId: after.Ref.ServerId})
	if err != nil {
		t.Fatal(err)
	}
	if len(socks.SocketRef) != 1 {
		t.Fatalf("GetServerSockets: %v, want gRPC-go's one connection", socks)
	}
	sock, err := cz.GetSocket(ctx, &channelzpb.GetSocketRequest{SocketId: socks.SocketRef[0].SocketId})
	if err != nil {
		t.Fatal(err)
	}
	if kind := option(sock.Socket, "transport"); kind != "h2" {
		t.Errorf("gRPC-go's connection is of transport %q, want h2", kind)
	}
	d := sock.Socket.Data
	if d.StreamsStarted < 5 || d.StreamsSucceeded < 4 || d.StreamsFailed != 0 || d.MessagesReceived < 5 || d.MessagesSent < 4 {
		t.Errorf("gRPC-go's connection: %v, want at least 5 streams started, 4 succeeded, 5 messages in and 4 out", d)
	}
	if ip := net.IP(sock.Socket.GetRemote().GetTcpipAddress().GetIpAddress()); !ip.IsLoopback() {
		t.Errorf("gRPC-go's connection comes from %v, want loopback", sock.Socket.GetRemote())
	}
}

// option is the socket's option of that name, or "".
func option(s *channelzpb.Socket, name string) string {
	for _, o := range s.GetData().GetOption() {
		if o.Name == name {
			return o.Value
		}
	}
	return ""
}
