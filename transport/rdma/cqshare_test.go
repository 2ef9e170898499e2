package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// eventFDs counts this process's verbs event files: completion channels,
// and each device context's asynchronous event file.
func eventFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("listing open fds: %v", err)
	}
	n := 0
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.Contains(l, "infinibandevent") {
			n++
		}
	}
	return n
}

// pollers counts the goroutines that wait on a completion channel: a
// connection's own poller, or a shared one.
func pollers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	k := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "rdma.(*ownCQ).poll(") || strings.Contains(g, "rdma.(*cqHub).poll(") {
			k++
		}
	}
	return k
}

// openPairs opens n connections from cli to srv's listener, and returns
// them with their accepted ends, matched.
func openPairs(t *testing.T, ctx context.Context, cli *Transport, lis transport.Listener, n int) (dialed, accepted []transport.Conn) {
	t.Helper()
	acc := make(chan transport.Conn, n)
	go func() {
		for range n {
			c, err := lis.Accept(ctx)
			if err != nil {
				close(acc)
				return
			}
			acc <- c
		}
	}()
	for i := range n {
		c, err := cli.Dial(ctx, lis.Addr().String())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		dialed = append(dialed, c)
	}
	byAddr := map[string]transport.Conn{}
	for range n {
		s, ok := <-acc
		if !ok {
			t.Fatal("accept failed")
		}
		byAddr[s.RemoteAddr().String()] = s
	}
	for _, c := range dialed {
		accepted = append(accepted, byAddr[c.LocalAddr().String()])
	}
	return dialed, accepted
}

// TestSharedCompletionsScale: with CompletionsShared, 100 connections
// (both ends in this process) cost no more completion channels and poller
// goroutines than 20 do: one of each per transport and device. Every one
// carries a message both ways at once, so the demultiplexing by QP number
// is exercised across all of them. The per-connection layout, measured the
// same way, grows by one of each per connection end (what main does).
func TestSharedCompletionsScale(t *testing.T) {
	ip := guestIP(t)
	for _, tc := range []struct {
		name   string
		layout CompletionLayout
		recv   ReceiveLayout
	}{
		{"shared", CompletionsShared, ReceivePerConnection},
		{"shared-srq", CompletionsShared, ReceiveShared},
		{"per-connection", CompletionsPerConnection, ReceivePerConnection},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Completions: tc.layout, Receive: tc.recv, BufferSize: 4096, RecvBuffers: 2, SendSlots: 2}
			cli, srv := New(o), New(o)
			lis, err := srv.Listen(net.JoinHostPort(ip, "0"))
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			// A hang guard only.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			fds0, pollers0 := eventFDs(t), pollers()
			var all []transport.Conn
			defer func() {
				for _, c := range all {
					c.Close()
				}
			}()
			var fds, ps []int
			const more = 80 // connections after the first 20
			for _, n := range []int{20, more} {
				d, a := openPairs(t, ctx, cli, lis, n)
				all = append(append(all, d...), a...)
				exchange(t, ctx, d, a)
				fds, ps = append(fds, eventFDs(t)-fds0), append(ps, pollers()-pollers0)
			}
			t.Logf("event fds %v, pollers %v at 20 and %d connections", fds, ps, 20+more)
			if tc.layout == CompletionsPerConnection {
				// The measure can see growth: 2 ends × more connections.
				if fds[1]-fds[0] < 2*more || ps[1]-ps[0] < 2*more {
					t.Errorf("per-connection layout: event fds %v, pollers %v: want one more of each per connection end", fds, ps)
				}
				return
			}
			if fds[1] != fds[0] || ps[1] != ps[0] {
				t.Errorf("event fds %v, pollers %v at 20 and %d connections: they grow with the connections", fds, ps, 20+more)
			}
			// Both transports: a completion channel (two fds: the
			// binding dups it for the netpoller) and the device
			// context's asynchronous event file each; one poller each.
			if fds[1] > 6 || ps[1] > 2 {
				t.Errorf("%d event fds, %d pollers for two transports on one device: want at most 6 and 2", fds[1], ps[1])
			}
		})
	}
}

// exchange sends one message each way on every pair at once and checks
// each arrives where it was sent.
func exchange(t *testing.T, ctx context.Context, dialed, accepted []transport.Conn) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(dialed))
	for i := range dialed {
		for dir, ends := range [][2]transport.Conn{{dialed[i], accepted[i]}, {accepted[i], dialed[i]}} {
			wg.Go(func() {
				msg := fmt.Appendf(nil, "pair %d direction %d", i, dir)
				if err := ends[0].Send(ctx, msg); err != nil {
					errs <- fmt.Errorf("pair %d: Send: %w", i, err)
					return
				}
				b, err := ends[1].Recv(ctx)
				if err != nil {
					errs <- fmt.Errorf("pair %d: Recv: %w", i, err)
					return
				}
				if !bytes.Equal(b.Bytes(), msg) {
					errs <- fmt.Errorf("pair %d: got %q, want %q", i, b.Bytes(), msg)
				}
				b.Release()
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSharedCompletionsTeardown closes connections on shared completion
// queues while messages are in flight both ways, many times: the closing
// connections' completions (flushed or not) keep coming through the
// shared queue while the others keep working. Every message carries its
// pair and round: none may arrive on another connection. A connection that
// stays open throughout keeps working, and once all are closed nothing is
// left: registered bytes, device objects, the counters match (goleak
// checks the goroutines). With shared receives (on shared completion
// queues or a connection's own) every SRQ buffer is accounted for when
// the pool closes: a receive a closing QP took mid-message (messages span
// several buffers and packets here) is flushed and posted again before
// the QP goes, none arrives as a stray.
func TestSharedCompletionsTeardown(t *testing.T) {
	ip := guestIP(t)
	for _, tc := range []struct {
		comp CompletionLayout
		recv ReceiveLayout
	}{{CompletionsShared, ReceivePerConnection}, {CompletionsShared, ReceiveShared}, {CompletionsPerConnection, ReceiveShared}} {
		recv := tc.recv
		name := fmt.Sprint("receive=", recv)
		if tc.comp == CompletionsPerConnection {
			name = "completions=per-connection/" + name
		}
		t.Run(name, func(t *testing.T) {
			if *completionsFlag != "" && tc.comp == CompletionsPerConnection {
				t.Skip("-rdma.completions sets every transport's layout")
			}
			before, devBefore := deviceCounters(t), resources(t)
			o := Options{Completions: tc.comp, Receive: recv, BufferSize: 4096, RecvBuffers: 4, SendSlots: 4, CloseGrace: 30 * time.Second}
			if tc.comp == CompletionsPerConnection {
				// Before shared receives were all accounted for at
				// teardown, a Close whose peer was open here at times
				// waited for signaled sends that did not complete (with
				// a 30 s grace this subtest took 875 s in one run, 8 s
				// after; not diagnosed further): the default grace keeps
				// such a wait short. The assertions do not depend on it.
				o.CloseGrace = 0
			}
			cli, srv := New(o), New(o)
			defer stallWatchdog(cli, 20*time.Second)()
			defer stallWatchdog(srv, 20*time.Second)()
			lis, err := srv.Listen(net.JoinHostPort(ip, "0"))
			if err != nil {
				t.Fatal(err)
			}
			// A hang guard only.
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			keepD, keepA := openPairs(t, ctx, cli, lis, 1)
			const rounds, pairs = 12, 6
			rng := rand.New(rand.NewPCG(1, 2))
			for r := range rounds {
				d, a := openPairs(t, ctx, cli, lis, pairs)
				var wg sync.WaitGroup
				// Each end sends until its connection closes, and reads
				// until it does, checking each message is its pair's.
				for i := range d {
					for dir, ends := range [][2]transport.Conn{{d[i], a[i]}, {a[i], d[i]}} {
						id := uint32(r*pairs*2 + i*2 + dir)
						wg.Go(func() {
							for seq := 0; ; seq++ {
								msg := make([]byte, 8+[]int{0, 100, 4000, 9000}[seq%4])
								binary.LittleEndian.PutUint32(msg, id)
								binary.LittleEndian.PutUint32(msg[4:], uint32(seq))
								if ends[0].Send(ctx, msg) != nil {
									return
								}
							}
						})
						wg.Go(func() {
							for seq := 0; ; seq++ {
								b, err := ends[1].Recv(ctx)
								if err != nil {
									return
								}
								got, gseq := binary.LittleEndian.Uint32(b.Bytes()), binary.LittleEndian.Uint32(b.Bytes()[4:])
								b.Release()
								if got != id || gseq != uint32(seq) {
									t.Errorf("round %d pair %d: message %d of stream %d arrived as message %d of stream %d", r, i, gseq, got, seq, id)
									return
								}
							}
						})
					}
				}
				// Let messages flow on every pair (progress, not time),
				// then close them, either end first.
				for i := range d {
					ok := eventually(time.Minute, func() bool { return d[i].(*conn).bytesIn.Load() > 20000 && a[i].(*conn).bytesIn.Load() > 20000 })
					if !ok {
						t.Fatalf("round %d pair %d: no traffic", r, i)
					}
				}
				for i := range d {
					first, second := d[i], a[i]
					if rng.IntN(2) == 0 {
						first, second = second, first
					}
					first.Close()
					second.Close()
				}
				wg.Wait()
				exchange(t, ctx, keepD, keepA)
				if t.Failed() {
					break
				}
			}
			exchange(t, ctx, keepD, keepA)
			// The long-lived pair's send slots all came back: a sender
			// holds none once its sends completed.
			for _, c := range append(keepD, keepA...) {
				c := c.(*conn)
				waitFor(t, "send slots back", func() bool {
					c.mu.Lock()
					defer c.mu.Unlock()
					return c.avail == c.o.SendSlots
				})
			}
			keepD[0].Close()
			keepA[0].Close()
			lis.Close()
			for _, tr := range []*Transport{cli, srv} {
				if got := tr.Gauges()["registered_bytes"]; got != 0 {
					t.Errorf("%d bytes still registered after every connection closed", got)
				}
				got := tr.Counters()
				if got["conns_opened"] != got["conns_closed"] {
					t.Errorf("opened %d connections, closed %d", got["conns_opened"], got["conns_closed"])
				}
				for k, v := range got {
					if strings.HasPrefix(k, "wc_error_") || k == "stray_completions" || k == "cq_places_leaked" || k == "protocol_errors" || k == "close_grace_expired" {
						t.Logf("%s %d", k, v)
					}
				}
				if got["cq_places_leaked"] != 0 {
					t.Errorf("%d connections left a shared CQ with work requests unaccounted for", got["cq_places_leaked"])
				}
				if recv == ReceiveShared {
					for _, k := range []string{"stray_completions", "shared_recvs_lost", "last_wqe_missed"} {
						if got[k] != 0 {
							t.Errorf("%s %d, want 0", k, got[k])
						}
					}
					t.Logf("last_wqe_settled %d", got["last_wqe_settled"])
				}
			}
			devAfter := resources(t)
			for _, k := range []string{"pd", "cq", "qp", "mr", "srq"} {
				if devAfter[k] != devBefore[k] {
					t.Errorf("%s count %d after the connections, %d before: a leak", k, devAfter[k], devBefore[k])
				}
			}
			checkCounters(t, before)
		})
	}
}

// TestCompletionsDefault: a zero Completions is the shared layout with
// shared receive queues, the per-connection one otherwise.
func TestCompletionsDefault(t *testing.T) {
	if *completionsFlag != "" {
		t.Skip("-rdma.completions sets every transport's layout")
	}
	for _, tc := range []struct {
		o    Options
		want CompletionLayout
	}{
		{Options{}, DefaultCompletions},
		{Options{Receive: ReceivePerConnection}, CompletionsPerConnection},
		{Options{Receive: ReceiveShared}, CompletionsShared},
		{Options{Receive: ReceiveShared, Completions: CompletionsPerConnection}, CompletionsPerConnection},
		{Options{Completions: CompletionsShared}, CompletionsShared},
	} {
		if got := tc.o.withDefaults().Completions; got != tc.want {
			t.Errorf("Options{Receive: %v, Completions: %v}: %v, want %v", tc.o.Receive, tc.o.Completions, got, tc.want)
		}
	}
}
