package rdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("listing open fds: %v", err)
	}
	return len(ents)
}

// TestThousandConnections holds 1 000 rdma:// connections open at once
// from one client transport to one server, with small pools so that the
// guest holds both ends, and a client budget that fits exactly those (their
// receive buffers and the send arena's first chunk, registered once): the
// next handshake fails with ErrMemoryBudget (a clear error, not the OOM
// killer pinning pages), the open ones all still carry a message (through
// the one chunk: the full budget keeps the arena from growing), and
// once all are closed nothing is left: fds, goroutines, device objects
// and registered bytes are back where they were (issue 10 item 5).
func TestThousandConnections(t *testing.T) {
	ip := guestIP(t)
	const n, dialers = 1000, 8
	// The per-connection receive layout: what each connection registers is
	// known. The send side costs an idle connection nothing: the arena's
	// first chunk is registered once, for all of them.
	o := Options{Receive: ReceivePerConnection, BufferSize: 4096, RecvBuffers: 2, SendSlots: 2}
	perConn, once := registeredCost(o)
	cliOpts, srvOpts := o, o
	cliOpts.MemoryBudget, srvOpts.MemoryBudget = n*perConn+once, -1
	cliTr, srvTr := New(cliOpts), New(srvOpts)

	fdsBefore, goroutinesBefore, devBefore := openFDs(t), runtime.NumGoroutine(), resources(t)
	// A hang guard only: the work is n handshakes and n round trips.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	lis, err := srvTr.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	acc := acceptAll(ctx, lis, nil)

	start := time.Now()
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
	t.Logf("%d connections set up in %v (%d dialers)", n, time.Since(start).Round(time.Millisecond), dialers)
	if !t.Failed() {
		if got := cliTr.Gauges()["registered_bytes"]; got != uint64(n*perConn+once) {
			t.Errorf("client: %d bytes registered for %d connections, want %d", got, n, n*perConn+once)
		}
		// The budget is full: the next handshake is refused, clearly.
		c, err := cliTr.Dial(ctx, lis.Addr().String())
		if err == nil {
			c.Close()
			t.Error("a dial beyond the budget succeeded")
		} else if !errors.Is(err, ErrMemoryBudget) || !strings.Contains(err.Error(), "registered-memory budget exhausted") {
			t.Errorf("dial beyond the budget: %v, want ErrMemoryBudget", err)
		}
		// Every connection held still works: a round trip on each.
		waitFor(t, "every connection accepted", func() bool { return len(acc.accepted()) == n })
		byAddr := map[string]transport.Conn{}
		for _, s := range acc.accepted() {
			byAddr[s.RemoteAddr().String()] = s
		}
		for i, c := range dialed {
			s := byAddr[c.LocalAddr().String()]
			if s == nil {
				t.Fatalf("connection %d (%v): no accepted end", i, c.LocalAddr())
			}
			msg := []byte(fmt.Sprint("hello ", i))
			if err := c.Send(ctx, msg); err != nil {
				t.Fatalf("connection %d: Send: %v", i, err)
			}
			b, err := s.Recv(ctx)
			if err != nil || !bytes.Equal(b.Bytes(), msg) {
				t.Fatalf("connection %d: Recv: %v", i, err)
			}
			b.Release()
		}
	}

	for _, c := range dialed {
		if c != nil {
			c.Close()
		}
	}
	lis.Close()
	acc.closeAll()
	for _, tr := range []*Transport{cliTr, srvTr} {
		if got := tr.Gauges()["registered_bytes"]; got != 0 {
			t.Errorf("%d bytes still counted as registered after every connection closed", got)
		}
		if got := tr.Counters(); got["conns_opened"] != got["conns_closed"] {
			t.Errorf("opened %d connections, closed %d", got["conns_opened"], got["conns_closed"])
		}
	}
	devAfter := resources(t)
	for _, k := range []string{"pd", "cq", "qp", "mr"} {
		if devAfter[k] != devBefore[k] {
			t.Errorf("%s count %d after the connections, %d before: a leak", k, devAfter[k], devBefore[k])
		}
	}
	// Closed connections' goroutines (poller, watcher) have returned once
	// Close has; the accept loop's too after closeAll.
	waitFor(t, "goroutines back to where they were", func() bool { return runtime.NumGoroutine() <= goroutinesBefore })
	if got := openFDs(t); got > fdsBefore {
		t.Errorf("%d fds open after every connection closed, %d before", got, fdsBefore)
	}
}
