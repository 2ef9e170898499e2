package rdma

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/rpc/rpctest"
	"github.com/rdmarpc/rdmarpc/test/conformance"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/transporttest"
)

// guestIP returns the IP of the RDMA device the test bed set up, or skips
// the test on a machine without one (testbed/README.md).
func guestIP(t testing.TB) string {
	t.Helper()
	if os.Getenv("RDMARPC_TEST_DEV") == "" {
		t.Skip("no RDMA device here (RDMARPC_TEST_DEV unset): this test runs in the Soft-RoCE guest, see testbed/README.md")
	}
	ip := os.Getenv("RDMARPC_TEST_IP")
	if net.ParseIP(ip) == nil {
		t.Fatalf("RDMARPC_TEST_IP=%q is not an IP", ip)
	}
	return ip
}

// completionsFlag runs the package's tests with another default completion
// layout (Options.Completions zero): the suites written for the default
// then cover the other one too.
var completionsFlag = flag.String("rdma.completions", "", "default completion layout for these tests: shared or perconn (empty: DefaultCompletions)")

// windowsFlag, false, runs the package's tests with the rendezvous'
// windowed regions off (rendezvousWindows): regions registered per
// transfer, as on a device without type 2 memory windows.
var windowsFlag = flag.Bool("rdma.windows", true, "send rendezvous regions through memory windows (rendezvousWindows); false: register a region per transfer")

// readChunkFlag sets rndvReadChunk, in KiB (0: the default): small chunks
// make every rendezvous of the tests a read of many chunks.
var readChunkFlag = flag.Uint("rdma.readchunk", 0, "rendezvous reads in chunks of this many KiB (rndvReadChunk; 0: the default)")

func TestMain(m *testing.M) {
	flag.Parse()
	rendezvousWindows = *windowsFlag
	if *readChunkFlag > 0 {
		rndvReadChunk = uint32(*readChunkFlag) << 10
	}
	switch *completionsFlag {
	case "":
	case "shared":
		defaultCompletions = CompletionsShared
	case "perconn":
		defaultCompletions = CompletionsPerConnection
	default:
		fmt.Fprintf(os.Stderr, "-rdma.completions=%q: want shared or perconn\n", *completionsFlag)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m)
}

// The conformance suite with the default pools and with tiny ones (two
// buffers, so credits run out all the time and fragments are small).
func TestConformance(t *testing.T) {
	ip := guestIP(t)
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"default", Options{MaxMessageSize: 16<<20 + 64}},
		{"tiny", Options{MaxMessageSize: 16<<20 + 64, BufferSize: 4096, RecvBuffers: 2, SendSlots: 2, RecvQueueBytes: 64 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(tc.o)
			o := tr.o
			transporttest.Run(t, transporttest.Config{
				Config:         conformance.Config{Transport: tr, Addr: net.JoinHostPort(ip, "0")},
				MaxMessageSize: o.MaxMessageSize,
				// The peer's credits' worth of buffers, the reassembly
				// queue, and one message on its way.
				MaxBuffered: int64(o.RecvBuffers*o.BufferSize+o.RecvQueueBytes) + 2*256<<10,
			})
		})
	}
}

// TestRPC runs the RPC conformance suite over rdma://.
func TestRPC(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{})
	defer stallWatchdog(tr, 20*time.Second)()
	rpctest.Run(t, rpctest.Config{Transport: tr, Addr: net.JoinHostPort(ip, "0"), Light: true,
		LeakOptions: []goleak.Option{goleak.IgnoreAnyFunction("github.com/rdmarpc/rdmarpc/transport/rdma.watchStalls")}})
}

var (
	_ transport.Activity = (*conn)(nil)
	_ transport.Arrivals = (*conn)(nil)
)

// BytesReceived counts every fragment's payload as it completes: after a
// fragmented message and a whole one arrive, it has grown by at least both.
func TestBytesReceived(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{BufferSize: 4096, RecvBuffers: 2, SendSlots: 2})
	client, server, _ := pair(t, tr, ip)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := server.BytesReceived()
	for _, n := range []int{100 << 10, 10} {
		if err := client.Send(ctx, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		b, err := server.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	if got := server.BytesReceived() - before; got < 100<<10+10 {
		t.Errorf("BytesReceived grew by %d after %d bytes of messages", got, 100<<10+10)
	}
}

// A peer that only receives returns its credits in credit-only messages,
// and those are signs of life: BytesReceived grows with them although no
// data comes back. Before, they counted nothing (no payload), so a server
// sending a thousand streams' responses to a client that only read them
// saw it silent, and its keepalive closed a live connection
// (TestRPC/ManyStreams over rdma://). Two credits, so the client must
// return them many times for the messages to get through.
func TestCreditReturnsAreActivity(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{BufferSize: 4096, RecvBuffers: 2, SendSlots: 2})
	client, server, _ := pair(t, tr, ip)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 20
	got := make(chan error, 1)
	go func() {
		for range n {
			b, err := client.Recv(ctx)
			if err != nil {
				got <- err
				return
			}
			b.Release()
		}
		got <- nil
	}()
	before := server.BytesReceived()
	for range n {
		if err := server.Send(ctx, []byte("one way")); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if tr.counters.creditOnlySent.Load() == 0 {
		t.Fatal("no credit-only message was sent: the test proves nothing")
	}
	if server.BytesReceived() == before {
		t.Errorf("BytesReceived did not grow while the peer returned credits for %d messages", n)
	}
}

// untilServed calls try until it succeeds, every 200 ms, failing the test
// when ctx ends first: a two-guest client starts with its server, not
// after its listener (testbed/README.md). what names the attempt.
func untilServed(t *testing.T, ctx context.Context, what string, try func() error) {
	t.Helper()
	for {
		err := try()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: the server guest never answered: %v", what, err)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}
