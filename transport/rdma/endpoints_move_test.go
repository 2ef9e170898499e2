package rdma

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/transport"
)

// The network TestAddressMoves moves an address on: a Soft-RoCE device of
// its own over a dummy interface, made afresh for each case so that each
// starts from the same GID table. The addresses are /32s: each is the
// primary address of its own subnet, so the kernel's route from this host
// to one of them leaves from that one (a secondary address's local route
// names the primary as its source), and removing one leaves the other.
const (
	moveNetdev = "rdmanet3"
	moveDev    = "rxe2"
	moveIP     = "10.9.12.1"
	fillerIP   = "10.9.12.9"
)

const movedLog = "an address moved to another GID table entry: using the new one"

// command runs a command of the guest, failing the test if it fails.
func command(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// moveNetwork adds moveNetdev with moveIP and moveDev over it, and removes
// them when the test ends.
func moveNetwork(t *testing.T) {
	t.Helper()
	if os.Getenv("ROLE") != "single" {
		t.Skip("needs the one-guest test bed (ROLE=single): it adds a network interface and an rxe device")
	}
	ip := "/usr/sbin/ip"
	t.Cleanup(func() {
		// rxe's delete waits until no process holds the device: bounded,
		// so a leaked device fails this test and not the whole binary.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, args := range [][]string{{"rdma", "link", "delete", moveDev}, {ip, "link", "del", moveNetdev}} {
			if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
				t.Errorf("cleanup: %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
	})
	command(t, ip, "link", "add", moveNetdev, "type", "dummy")
	command(t, ip, "addr", "add", moveIP+"/32", "dev", moveNetdev)
	command(t, ip, "link", "set", moveNetdev, "up")
	command(t, "rdma", "link", "add", moveDev, "type", "rxe", "netdev", moveNetdev)
	waitGID(t, moveIP)
}

// waitGID waits for ip's RoCE v2 GID (rxe publishes it a moment after the
// address comes) and returns its endpoint.
func waitGID(t *testing.T, ip string) rdmadev.Endpoint {
	t.Helper()
	for i := 0; ; i++ {
		ep, err := rdmadev.ForIP(net.ParseIP(ip))
		if err == nil {
			return ep
		}
		if i == 600 {
			t.Fatalf("%s never served %s: %v", moveDev, ip, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitEmptied waits until ep's GID table entry no longer holds its GID.
func waitEmptied(t *testing.T, ep rdmadev.Endpoint) {
	t.Helper()
	for i := 0; rdmadev.Current(ep); i++ {
		if i == 600 {
			t.Fatalf("GID index %d of %s still holds %v", ep.GIDIndex, ep.Device, net.IP(ep.GID[:]))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// moveAddress gives moveIP another GID table entry, as an address removed
// and added again does when another took its entry meanwhile: moveIP
// goes, fillerIP comes and takes the freed entry, moveIP comes back on the
// next free one. Then, unless keepFiller, fillerIP goes: moveIP's old
// index is empty (a queue pair moved to RTR with it fails with ENODATA);
// with keepFiller it holds fillerIP's GID (RTR works, and the packets
// leave from fillerIP, which the peer drops). It checks that the move
// happened so, and returns moveIP's endpoints before and after.
func moveAddress(t *testing.T, keepFiller bool) (was, now rdmadev.Endpoint) {
	t.Helper()
	ip := "/usr/sbin/ip"
	was = waitGID(t, moveIP)
	command(t, ip, "addr", "del", moveIP+"/32", "dev", moveNetdev)
	waitEmptied(t, was)
	command(t, ip, "addr", "add", fillerIP+"/32", "dev", moveNetdev)
	filler := waitGID(t, fillerIP)
	command(t, ip, "addr", "add", moveIP+"/32", "dev", moveNetdev)
	now = waitGID(t, moveIP)
	if filler.GIDIndex != was.GIDIndex || now.GIDIndex == was.GIDIndex {
		t.Fatalf("the move did not happen as arranged: %s was at GID index %d, %s took %d, %s came back at %d",
			moveIP, was.GIDIndex, fillerIP, filler.GIDIndex, moveIP, now.GIDIndex)
	}
	if !keepFiller {
		command(t, ip, "addr", "del", fillerIP+"/32", "dev", moveNetdev)
		waitEmptied(t, filler)
	}
	t.Logf("%s moved from GID index %d to %d; index %d now holds %s", moveIP, was.GIDIndex, now.GIDIndex, was.GIDIndex,
		map[bool]string{true: fillerIP, false: "nothing"}[keepFiller])
	return was, now
}

// moveServer is an echo server on moveIP for TestAddressMoves.
type moveServer struct {
	lis   transport.Listener
	acc   *acceptor
	ended chan struct{} // a served connection ended (and was closed)
}

func startMoveServer(t *testing.T, ctx context.Context, tr *Transport) *moveServer {
	t.Helper()
	lis, err := tr.Listen(net.JoinHostPort(moveIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &moveServer{lis: lis, ended: make(chan struct{}, 16)}
	s.acc = acceptAll(ctx, lis, func(c transport.Conn) {
		echo(ctx)(c)
		c.Close()
		s.ended <- struct{}{}
	})
	return s
}

func (s *moveServer) stop() {
	s.lis.Close()
	s.acc.closeAll()
}

// dialEcho dials s and makes a round trip; attempts dials until one works
// (at most 3) and returns how many failed. It closes the connection and
// waits until the server closed its end too: no queue pair holds a GID
// table entry afterwards.
func dialEcho(t *testing.T, ctx context.Context, tr *Transport, s *moveServer) (failed int) {
	t.Helper()
	for {
		err := func() error {
			start := time.Now()
			c, err := tr.Dial(ctx, s.lis.Addr().String())
			if err != nil {
				return err
			}
			defer func() {
				c.Close()
				select {
				case <-s.ended:
				case <-ctx.Done():
				}
			}()
			// A queue pair sending from the wrong address reaches RTR
			// and RTS, and its first message goes unanswered: a bound
			// for the round trip, far beyond what a working one takes
			// (well under a second in the guest).
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := c.Send(rctx, []byte("ping")); err != nil {
				return err
			}
			b, err := c.Recv(rctx)
			if err != nil {
				return err
			}
			b.Release()
			t.Logf("dial and round trip: %v", time.Since(start))
			return nil
		}()
		if err == nil {
			return failed
		}
		failed++
		t.Logf("attempt %d failed: %v", failed, err)
		if failed == 3 {
			t.Fatalf("no connection in %d attempts", failed)
		}
	}
}

// observed is a logger recording Info and above.
func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.InfoLevel)
	return zap.New(core), logs
}

// TestAddressMoves: an address that moves to another GID table entry while
// a transport holds its endpoint (a client's cache of local addresses, a
// listener's offered endpoints) is found at its new entry before the next
// handshake, which connects at the first attempt; one log line says so.
// Before, with the old entry empty, RTR failed with ENODATA (a client's
// dial once, until it forgot the entry; a server's every handshake); with
// the old entry holding another address, RTR worked and the connection's
// first message went unanswered, every time. 3 to 5 s per case in the
// guest under -race.
func TestAddressMoves(t *testing.T) {
	guestIP(t)
	for _, tc := range []struct {
		name       string
		server     bool // the server's endpoint moves, else the client's cache
		keepFiller bool
	}{
		{"client/emptied", false, false},
		{"client/taken", false, true},
		{"server/emptied", true, false},
		{"server/taken", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			moveNetwork(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			start := time.Now()
			log, logs := observed()
			if tc.server {
				// The server listens before the move, a fresh client
				// dials after it.
				srv := startMoveServer(t, ctx, New(Options{Netdevs: []string{moveNetdev}, Logger: log}))
				defer srv.stop()
				if n := dialEcho(t, ctx, New(Options{}), srv); n != 0 {
					t.Fatalf("before the move: %d failed attempts", n)
				}
				moveAddress(t, tc.keepFiller)
				if n := dialEcho(t, ctx, New(Options{}), srv); n != 0 {
					t.Errorf("after the move: %d failed attempts before one connected, want 0", n)
				}
			} else {
				// The client dials before the move; a server that
				// listens after it serves the address's new entry.
				cli := New(Options{Logger: log})
				srv := startMoveServer(t, ctx, New(Options{Netdevs: []string{moveNetdev}}))
				if n := dialEcho(t, ctx, cli, srv); n != 0 {
					t.Fatalf("before the move: %d failed attempts", n)
				}
				srv.stop()
				_, now := moveAddress(t, tc.keepFiller)
				srv = startMoveServer(t, ctx, New(Options{Netdevs: []string{moveNetdev}, GIDIndex: now.GIDIndex}))
				defer srv.stop()
				if n := dialEcho(t, ctx, cli, srv); n != 0 {
					t.Errorf("after the move: %d failed attempts before one connected, want 0", n)
				}
			}
			if got := logs.FilterMessage(movedLog).Len(); got != 1 {
				t.Errorf("%d log lines %q, want 1: %v", got, movedLog, logs.All())
			} else {
				t.Logf("log: %s %v", movedLog, logs.FilterMessage(movedLog).All()[0].ContextMap())
			}
			t.Logf("case took %v", time.Since(start))
		})
	}
}
