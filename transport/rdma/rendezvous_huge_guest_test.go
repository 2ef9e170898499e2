package rdma

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// hugeFlag turns TestTwoHostsRendezvousHuge on: its message size in MiB.
// Off by default: 1 GiB each way takes minutes in the emulated guests, and
// the guests need about 2.5 times the message (RDMARPC_VM2_MEM).
var hugeFlag = flag.Int("rdma.huge", 0, "TestTwoHostsRendezvousHuge's message size in MiB, 0: skip it")

// TestTwoHostsRendezvousHuge, in the test bed's two-guest mode with
// -rdma.huge=1024: the client sends a 1 GiB message by rendezvous, the
// server checks it and answers with a 1 GiB message of its own, which the
// client checks. Each side marshals into the region NewSendBuffer lends
// and reads the message it receives in place, so nothing of the size of
// the message is on the Go heap: the process's peak resident memory stays
// within its memory budget (the configured bound: twice the message, a
// side may hold its read buffer and its region at once, plus 64 MiB) and
// a fixed allowance for the rest of the process.
func TestTwoHostsRendezvousHuge(t *testing.T) {
	if *hugeFlag <= 0 {
		t.Skip("off unless -rdma.huge=MiB (1024: 1 GiB each way, minutes in the test bed)")
	}
	ip := guestIP(t)
	role, peer := os.Getenv("ROLE"), os.Getenv("PEER_IP")
	if role != "server" && role != "client" {
		t.Skip("runs in the test bed's two-guest mode (ROLE=server|client)")
	}
	n := *hugeFlag << 20
	budget := 2*int64(n) + 64<<20
	const allowance = 256 << 20 // the binary, the runtime, the race detector's shadow
	before := deviceCounters(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	tr := New(Options{MaxMessageSize: n, RendezvousThreshold: 256 << 10, MemoryBudget: budget})
	addr := net.JoinHostPort(ip, "7473")
	var c transport.Conn
	if role == "server" {
		lis, err := tr.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		if c, err = lis.Accept(ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		untilServed(t, ctx, "dial", func() (err error) {
			c, err = tr.Dial(ctx, net.JoinHostPort(peer, "7473"))
			return err
		})
	}
	defer c.Close()
	send := func(seed uint64) {
		start := time.Now()
		b, err := c.NewSendBuffer(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		fillHuge(b.Bytes(), seed)
		if err := c.SendBuffer(ctx, b); err != nil {
			t.Fatal(err)
		}
		t.Logf("sent %d MiB in %v", n>>20, time.Since(start))
	}
	recv := func(seed uint64) {
		start := time.Now()
		b, err := c.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := time.Since(start)
		err = checkHuge(b.Bytes(), n, seed)
		b.Release()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("received %d MiB in %v", n>>20, got)
	}
	if role == "server" {
		recv(1)
		send(2)
		select { // the client closes once it has the answer
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("the client never closed")
		}
	} else {
		send(1)
		recv(2)
		c.Close()
	}
	m := tr.Counters()
	t.Logf("counters: %v", m)
	if m["rendezvous_sent"] != 1 || m["rendezvous_read"] != 1 {
		t.Errorf("rendezvous sent %d, read %d; want 1 each", m["rendezvous_sent"], m["rendezvous_read"])
	}
	hwm := peakRSS(t)
	t.Logf("peak resident memory %d MiB; budget %d MiB (the message %d MiB)", hwm>>20, budget>>20, n>>20)
	if hwm > budget+allowance {
		t.Errorf("peak resident memory %d MiB, beyond the budget %d MiB plus %d MiB", hwm>>20, budget>>20, allowance>>20)
	}
	checkCounters(t, before)
}

// fillHuge writes a pattern of seed and each word's offset (a misplaced
// or repeated chunk does not match).
func fillHuge(b []byte, seed uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], seed<<56^uint64(i))
	}
}

func checkHuge(b []byte, n int, seed uint64) error {
	if len(b) != n {
		return fmt.Errorf("got %d bytes, want %d", len(b), n)
	}
	for i := 0; i+8 <= len(b); i += 8 {
		if w := binary.LittleEndian.Uint64(b[i:]); w != seed<<56^uint64(i) {
			return fmt.Errorf("word at %d is %#x, want %#x", i, w, seed<<56^uint64(i))
		}
	}
	return nil
}

// peakRSS is the process's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}
