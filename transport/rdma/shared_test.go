package rdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/rpc/rpctest"
	"github.com/rdmarpc/rdmarpc/test/conformance"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
	"github.com/rdmarpc/rdmarpc/transport/transporttest"
)

// poolState sums a transport's shared receive pools: buffers, buffers
// committed to windows, and bytes registered for them.
func poolState(tr *Transport) (buffers, committed int, bytes int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, d := range tr.devices {
		if p := d.pool; p != nil {
			p.mu.Lock()
			buffers += p.acct.Buffers()
			committed += p.acct.Committed()
			bytes += p.charged
			p.mu.Unlock()
		}
	}
	return buffers, committed, bytes
}

// The conformance suite over shared receive queues, at the shared defaults
// and with tiny windows (one guaranteed credit, four at most, 4 KiB
// buffers: lends and give-backs all the time).
func TestSharedConformance(t *testing.T) {
	ip := guestIP(t)
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"default", Options{Receive: ReceiveShared, MaxMessageSize: 16<<20 + 64}},
		{"tiny", Options{Receive: ReceiveShared, MaxMessageSize: 16<<20 + 64, BufferSize: 4096, RecvBuffers: 4, SendSlots: 2, RecvQueueBytes: 64 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(tc.o)
			o := tr.o
			transporttest.Run(t, transporttest.Config{
				Config:         conformance.Config{Transport: tr, Addr: net.JoinHostPort(ip, "0")},
				MaxMessageSize: o.MaxMessageSize,
				MaxBuffered:    int64(o.RecvBuffers*o.BufferSize+o.RecvQueueBytes) + 2*256<<10,
			})
		})
	}
}

// TestSharedRPC runs the RPC conformance suite over shared receive queues.
func TestSharedRPC(t *testing.T) {
	ip := guestIP(t)
	before := deviceCounters(t)
	tr := New(Options{Receive: ReceiveShared})
	defer stallWatchdog(tr, 20*time.Second)()
	rpctest.Run(t, rpctest.Config{Transport: tr, Addr: net.JoinHostPort(ip, "0"), Light: true,
		LeakOptions: []goleak.Option{goleak.IgnoreAnyFunction("github.com/rdmarpc/rdmarpc/transport/rdma.watchStalls")}})
	checkCounters(t, before)
	if tr.Counters()["credits_lent"] == 0 {
		t.Error("no credit was ever lent: the suite did not exercise lending")
	}
}

// TestSharedPoolIdle opens 200 connections over shared receive queues,
// makes them all busy at once (every client sends a burst, every server
// echoes it, so windows are lent to and pools grow), then lets them idle:
// the lent credits come back, each side's receive memory stays within 64
// KiB per idle connection, and no Send met an empty queue. After all close
// nothing is left registered, and the device holds what it did before.
func TestSharedPoolIdle(t *testing.T) {
	ip := guestIP(t)
	const n, dialers, burst = 200, 8, 24
	o := Options{Receive: ReceiveShared}
	cliTr, srvTr := New(o), New(o)
	var (
		connsMu sync.Mutex
		all     []*conn
	)
	hook := func(c *conn) { connsMu.Lock(); all = append(all, c); connsMu.Unlock() }
	cliTr.connHook, srvTr.connHook = hook, hook
	conns := func() []*conn { connsMu.Lock(); defer connsMu.Unlock(); return append([]*conn(nil), all...) }
	counters, devBefore, goroutinesBefore := deviceCounters(t), resources(t), runtime.NumGoroutine()
	// A hang guard only.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	lis, err := srvTr.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	acc := acceptAll(ctx, lis, echo(ctx)) // the server echoes whatever comes
	dialed := make([]transport.Conn, n)
	errs := make(chan error, n)
	var dwg sync.WaitGroup
	for d := range dialers {
		dwg.Go(func() {
			for i := d; i < n; i += dialers {
				c, err := cliTr.Dial(ctx, lis.Addr().String())
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
				dialed[i] = c
			}
		})
	}
	dwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	window := cliTr.o.SharedCredits + credit.Extra
	for _, tr := range []*Transport{cliTr, srvTr} {
		// Fresh windows start full while the pool has spare buffers.
		buffers, committed, _ := poolState(tr)
		if committed < n*window || buffers < committed {
			t.Errorf("after %d handshakes: %d of %d pool buffers committed, want at least %d", n, committed, buffers, n*window)
		}
	}

	// All busy at once: a burst of messages in flight on every connection
	// (sent ahead of their echoes), in every size up to two buffers. Then
	// idle: every lent credit comes back (the windows fresh connections
	// start with included), and receive memory per connection is within
	// bounds. Twice: the second burst starts from guaranteed windows, so
	// it is lent to.
	size := func(i, j int) int { return (i*7 + j*1013) % (2 * cliTr.o.BufferSize) }
	for round := range 2 {
		busy(t, ctx, dialed, burst, size)
		for side, tr := range map[string]*Transport{"client": cliTr, "server": srvTr} {
			if !eventually(time.Minute, func() bool {
				_, committed, _ := poolState(tr)
				return committed == n*window
			}) {
				_, committed, _ := poolState(tr)
				t.Errorf("%s, round %d: %d pool buffers still committed while idle, want %d", side, round, committed, n*window)
				for _, c := range conns() {
					c.dumpLent(t)
				}
				t.FailNow()
			}
			buffers, committed, poolBytes := poolState(tr)
			total := tr.Gauges()["registered_bytes"]
			t.Logf("%s idle after burst %d: %d connections, pool %d buffers (%d committed), %d KiB registered for receives (%.1f KiB per connection), %d KiB in all; %d credits lent, %d given back",
				side, round, n, buffers, committed, poolBytes>>10, float64(poolBytes)/1024/n, total>>10, tr.Counters()["credits_lent"], tr.Counters()["credits_given_back"])
			if per := poolBytes / n; per > 64<<10 {
				t.Errorf("%s: %d bytes of receive memory registered per idle connection, want at most 64 KiB", side, per)
			}
		}
	}
	for side, tr := range map[string]*Transport{"client": cliTr, "server": srvTr} {
		if tr.Counters()["credits_lent"] == 0 {
			t.Errorf("%s: no credit lent while every connection was busy", side)
		}
	}
	if cliTr.Counters()["credits_given_back"] == 0 && srvTr.Counters()["credits_given_back"] == 0 {
		t.Error("nothing was given back: the idle phase proves nothing")
	}
	checkCounters(t, counters)

	for _, c := range dialed {
		c.Close()
	}
	lis.Close()
	acc.closeAll()
	for side, tr := range map[string]*Transport{"client": cliTr, "server": srvTr} {
		if got := tr.Gauges()["registered_bytes"]; got != 0 {
			t.Errorf("%s: %d bytes still registered after every connection closed", side, got)
		}
		if _, committed, _ := poolState(tr); committed != 0 {
			t.Errorf("%s: %d pool buffers still committed", side, committed)
		}
	}
	devAfter := resources(t)
	for _, k := range []string{"pd", "cq", "qp", "mr", "srq"} {
		if devAfter[k] != devBefore[k] {
			t.Errorf("%s count %d after the connections, %d before: a leak", k, devAfter[k], devBefore[k])
		}
	}
	waitFor(t, "goroutines back to where they were", func() bool { return runtime.NumGoroutine() <= goroutinesBefore })
}

// TestSharedFallbackAndRefusal: a client with ReceiveShared refuses a server
// that does not understand lent credits (its hello sets no featLend), and
// a server with ReceiveShared gives such a client the per-connection layout.
func TestSharedFallbackAndRefusal(t *testing.T) {
	ip := guestIP(t)
	shared := New(Options{Receive: ReceiveShared})
	old := New(Options{})
	old.oldHello = true
	// Old client, shared server: per-connection layout, and it works.
	client, server := dialPair(t, old, shared, ip)
	if server.pool != nil || client.pool != nil {
		t.Fatalf("an old client got a shared receive queue (server pool %v)", server.pool != nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Send(ctx, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	b, err := server.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	// Shared client, old server: refused, saying why.
	lis, err := old.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		if c, err := lis.Accept(ctx); err == nil {
			c.Close()
		}
	}()
	c, err := shared.Dial(ctx, lis.Addr().String())
	if err == nil {
		c.Close()
		t.Fatal("a shared client connected to a server without lent credits")
	}
	if !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("shared client, old server: %v, want a protocol error", err)
	}
	t.Log(err)
}

// dialPair connects a client of one transport to a server of another.
func dialPair(t *testing.T, cli, srv *Transport, ip string) (client, server *conn) {
	t.Helper()
	c, s, _ := connectPair(t, cli, srv, ip)
	return c.(*conn), s.(*conn)
}

// dumpLent logs a connection's lent credits, both ways.
func (c *conn) dumpLent(t *testing.T) {
	c.mu.Lock()
	wmax, avail := c.win.Max(), c.win.Avail()
	c.mu.Unlock()
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if wmax == c.peer.keep() && c.led.Recvs() == c.o.SharedCredits {
		return
	}
	t.Logf("conn %v: sending window %d (%d available, keeps %d, swept %v); receiving window %d (lend untold %d, owed %d, unreturned %d, threshold %d)",
		c.boot.LocalAddr(), wmax, avail, c.peer.keep(), c.swept.Load(), c.led.Recvs(), c.led.LendOwed(), c.led.Owed(), c.led.Unreturned(), c.led.Threshold())
}

// busy sends burst messages on every connection at once, ahead of their
// echoes, and checks the echoes.
func busy(t *testing.T, ctx context.Context, dialed []transport.Conn, burst int, size func(i, j int) int) {
	t.Helper()
	var bwg sync.WaitGroup
	berrs := make(chan error, len(dialed))
	for i, c := range dialed {
		bwg.Go(func() {
			done := make(chan error, 1)
			go func() {
				for j := range burst {
					b, err := c.Recv(ctx)
					if err != nil {
						done <- err
						return
					}
					want := bytes.Repeat([]byte{byte(i + j)}, size(i, j))
					ok := bytes.Equal(b.Bytes(), want)
					b.Release()
					if !ok {
						done <- fmt.Errorf("echo %d: wrong bytes", j)
						return
					}
				}
				done <- nil
			}()
			for j := range burst {
				if err := c.Send(ctx, bytes.Repeat([]byte{byte(i + j)}, size(i, j))); err != nil {
					berrs <- fmt.Errorf("connection %d: send %d: %w", i, j, err)
					<-done
					return
				}
			}
			if err := <-done; err != nil {
				berrs <- fmt.Errorf("connection %d: %w", i, err)
			}
		})
	}
	bwg.Wait()
	close(berrs)
	for err := range berrs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}
