package rdma

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/channelz"
	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// TestChannelzRDMA: channelz shows an rdma:// connection as one: the
// client's and the server's sockets and the listener say transport rdma,
// carry the transport's counters, and count the calls made over it.
func TestChannelzRDMA(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{})
	lis, err := tr.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := lis.Addr().String()
	cc, err := rpc.Dial(ctx, addr, rpc.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	for range 3 {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}

	var ch *channelz.Channel
	chs, _ := channelz.TopChannels(0, 1000)
	for _, c := range chs {
		if c.Target() == addr {
			ch = c
		}
	}
	if ch == nil || len(ch.SubChannels()) != 1 || len(ch.SubChannels()[0].Sockets()) != 1 {
		t.Fatalf("no channel with one subchannel and one socket for %s", addr)
	}
	checkSocket(t, "client", ch.SubChannels()[0].Sockets()[0])

	var server *channelz.Server
	srvs, _ := channelz.Servers(0, 1000)
	for _, s := range srvs {
		for _, ls := range s.ListenSockets() {
			if ls.Info().Local.String() == addr {
				server = s
				if ls.Info().Transport != "rdma" {
					t.Errorf("the listener's transport is %q, want rdma", ls.Info().Transport)
				}
			}
		}
	}
	if server == nil {
		t.Fatalf("no server listening on %s", addr)
	}
	socks, _ := server.Sockets(0, 0)
	if len(socks) != 1 {
		t.Fatalf("server sockets: %d, want 1", len(socks))
	}
	checkSocket(t, "server", socks[0])
}

func checkSocket(t *testing.T, side string, k *channelz.Socket) {
	t.Helper()
	if k.Info().Transport != "rdma" {
		t.Errorf("%s socket's transport %q, want rdma", side, k.Info().Transport)
	}
	m := k.Metrics()
	if m.StreamsStarted != 3 || m.StreamsSucceeded != 3 || m.MessagesSent != 3 || m.MessagesReceived != 3 {
		t.Errorf("%s socket: %+v, want 3 streams that succeeded, 3 messages each way", side, m)
	}
	if len(m.Counters) == 0 {
		t.Errorf("%s socket shows none of the transport's counters", side)
	}
	t.Logf("%s socket %s: streams %d/%d/%d, messages %d/%d, %d transport counters", side, k.Name(), m.StreamsStarted, m.StreamsSucceeded, m.StreamsFailed, m.MessagesSent, m.MessagesReceived, len(m.Counters))
}
