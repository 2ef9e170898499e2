package rdma

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/transport"
)

// TestEndpointsAppear (issue 26): a device that comes up after the server
// started listening is offered to clients once the listener looks its
// endpoints up again, and one that goes is no longer offered. The server
// listens while rxe0 is its only device; then rxe1 comes (over a dummy
// interface of its own). A client whose Options.Devices name only rxe1
// reaches none of the endpoints offered at Listen; once rxe1's is offered
// too, it connects over rxe1 and a message goes both ways. Before, a
// listener offered what it found at Listen for good, and the client was
// refused with ErrNoDevice every time.
func TestEndpointsAppear(t *testing.T) {
	ip := guestIP(t)
	defer func(was time.Duration) { endpointsRefresh = was }(endpointsRefresh)
	endpointsRefresh = 200 * time.Millisecond

	// The first handshake on a device opens it on both sides: in a guest
	// starved by a loaded host it once took longer than the default 10 s.
	// A minute is a hang guard, not a measure of speed.
	const handshake = time.Minute
	core, logs := observer.New(zapcore.InfoLevel)
	srvTr := New(Options{Logger: zap.New(core), HandshakeTimeout: handshake})
	lis, err := srvTr.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	accepted := make(chan transport.Conn, 4)
	go func() {
		for {
			c, err := lis.Accept(ctx)
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	// Deferred, so they run before secondNetworks' cleanup deletes rxe1:
	// rxe's device cannot go while a context holds it open.
	defer func() {
		lis.Close()
		for c := range accepted {
			c.Close()
		}
	}()

	cliTr := New(Options{Devices: []string{secondDev}, HandshakeTimeout: handshake})
	secondNetworks(t) // rxe1 over rdmanet1 (10.9.10.1) comes now
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	target := net.JoinHostPort(ip, port)
	// The first dial may still get the offering of Listen (the listener
	// looks again at most every endpointsRefresh): it is refused as before
	// the change. A later one must connect; each attempt is one bootstrap
	// round trip, so progress, not time, bounds the loop.
	var c transport.Conn
	refused := 0
	for c == nil {
		c, err = cliTr.Dial(ctx, target)
		if err == nil {
			break
		}
		if !errors.Is(err, transport.ErrNoDevice) {
			t.Fatalf("dial: %v", err)
		}
		if refused++; refused == 50 {
			t.Fatalf("after %d dials the server still offers no endpoint rxe1 reaches: %v", refused, err)
		}
		time.Sleep(endpointsRefresh)
	}
	defer c.Close()
	t.Logf("connected over %s after %d refused dials", secondDev, refused)
	sent := sentPkts(t, secondDev)
	if err := c.Send(ctx, []byte("over the new device")); err != nil {
		t.Fatal(err)
	}
	s, ok := <-accepted
	if !ok {
		t.Fatal("the listener accepted nothing")
	}
	accepted <- s // closed by the deferred cleanup
	b, err := s.Recv(ctx)
	if err != nil || string(b.Bytes()) != "over the new device" {
		t.Fatalf("server received %q, %v", b.Bytes(), err)
	}
	b.Release()
	if now := sentPkts(t, secondDev); now == sent {
		t.Fatalf("%s sent no packet for the message (sent_pkts %d)", secondDev, now)
	}
	if logs.FilterMessage("the RDMA endpoints this server offers changed").Len() == 0 {
		t.Fatal("the listener did not log the change of its endpoints")
	}
}
