package rdma

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
)

// TestHandshakeFlood floods a server with default Options with well-formed
// hellos that never complete (issue 26 item 5): 64 sockets at a time from
// one source address (127.0.0.2), each sending a hello with a plausible
// queue pair and never the ready byte, reconnecting when dropped. While the
// flood holds its share, real clients from another address connect and
// call. The flood must hold at most the per-source share of queue pairs
// (an eighth of MaxHandshakes) at any time; before the gate it held one
// per socket, each for the whole handshake timeout. The figures — queue
// pairs and registered bytes the flood held — go to the test log.
func TestHandshakeFlood(t *testing.T) {
	ip := guestIP(t)
	ep, err := rdmadev.ForIP(net.ParseIP(ip))
	if err != nil {
		t.Fatal(err)
	}
	const flooders, calls = 64, 10
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
	defer cancel()
	before := resources(t)
	srv := New(Options{})
	share := max(1, srv.o.MaxHandshakes/8)
	lis, err := srv.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	acc := acceptAll(ctx, lis, echo(ctx))
	// Deferred too: a failure below must not leave the accept loop to the
	// next tests' leak checks (a failed wait here once failed every
	// conformance subtest after it).
	defer func() {
		lis.Close()
		acc.closeAll()
	}()

	// The flood.
	forged := hello{features: featLend, qpn: 0x1234, psn: 1, gid: ep.GID, mtu: 1024,
		bufSize: 64 << 10, recvs: 16, maxMessage: 1 << 20}.encode()
	stop, stopFlood := context.WithCancel(ctx)
	var (
		holding, maxHolding   atomic.Int64 // flood sockets the server answered with its hello, not yet dropped
		answered, refusedN    atomic.Int64
		maxRegistered, maxQPs atomic.Int64
		maxInProgress         atomic.Int64 // the server's handshakes in progress
	)
	raise := func(m *atomic.Int64, v int64) {
		for o := m.Load(); v > o && !m.CompareAndSwap(o, v); o = m.Load() {
		}
	}
	var fwg sync.WaitGroup
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	for range flooders {
		fwg.Go(func() {
			for stop.Err() == nil {
				nc, err := d.DialContext(stop, "tcp", lis.Addr().String())
				if err != nil {
					continue
				}
				unblock := context.AfterFunc(stop, func() { nc.Close() })
				var head [4]byte
				if _, err := nc.Write(forged); err == nil {
					if _, err := io.ReadFull(nc, head[:]); err == nil && string(head[:]) == helloMagic {
						answered.Add(1)
						raise(&maxHolding, holding.Add(1))
						g := srv.Gauges()
						raise(&maxRegistered, int64(g["registered_bytes"]))
						raise(&maxInProgress, int64(g["handshakes_in_progress"]))
						_, _ = io.Copy(io.Discard, nc) // until the server drops it
						holding.Add(-1)
					} else if err == nil && string(head[:]) == refuseMagic {
						refusedN.Add(1)
					}
				}
				unblock()
				nc.Close()
			}
		})
	}
	defer func() {
		stopFlood()
		fwg.Wait()
	}()
	// The flood holds its share, and more of it wait (or, were there no
	// bound, it holds more).
	waitFor(t, "the flood holding its share with more waiting", func() bool {
		n := holding.Load()
		return n > int64(share) || n == int64(share) && srv.Gauges()["handshakes_waiting"] > 0
	})
	raise(&maxQPs, int64(resources(t)["qp"]-before["qp"]))

	// Real clients, from the device's address, connect and call.
	cli := New(Options{MemoryBudget: -1})
	for i := range calls {
		start := time.Now()
		c, err := cli.Dial(ctx, lis.Addr().String())
		if err != nil {
			t.Fatalf("real client %d during the flood: %v", i, err)
		}
		if err := c.Send(ctx, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		b, err := c.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
		if i == 0 {
			t.Logf("a real client's dial and call during the flood took %v", time.Since(start).Round(time.Millisecond))
		}
		c.Close()
		raise(&maxQPs, int64(resources(t)["qp"]-before["qp"]))
	}
	g := srv.Gauges()
	stopFlood()
	fwg.Wait()
	c := srv.Counters()
	t.Logf("flood of %d sockets from one address: %d hellos answered (%d at most at once, the share is %d), %d refused; server: %d handshakes waited, %d refused; "+
		"%d handshakes in progress at most; at most %d queue pairs above the start (the flood's and one real connection's two ends), %s registered at most while the flood held its share; gauges at the end: %v",
		flooders, answered.Load(), maxHolding.Load(), share, refusedN.Load(), c["handshakes_waited"], c["handshakes_refused"],
		maxInProgress.Load(), maxQPs.Load(), rdmadev.Bytes(maxRegistered.Load()), g)
	// The server's own count, not the flood's: a flooder sees its socket
	// dropped only after the server admitted the next hello in its place,
	// so the flood may count one more than the server holds. The real
	// clients dial one at a time, from another source.
	if n := maxInProgress.Load(); n > int64(share)+1 {
		t.Errorf("the server had %d handshakes in progress during the flood; a source may hold %d, and one real client dials at a time", n, share)
	}
	if n := maxQPs.Load(); n > int64(share)+2 {
		t.Errorf("%d queue pairs above the start during the flood; want at most the flood's %d and a real connection's two", n, share)
	}

	lis.Close()
	acc.closeAll()
	waitFor(t, "every queue pair destroyed", func() bool { return resources(t)["qp"] == before["qp"] })
}
