package rdma

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
)

// errorCounters are the device counters that must stay at zero: each one
// means a Send met an empty receive queue or the transport gave up.
var errorCounters = []string{"rcvd_rnr_err", "send_rnr_err", "retry_rnr_exceeded_err", "retry_exceeded_err"}

func deviceCounters(t *testing.T) map[string]uint64 {
	t.Helper()
	m, err := rdmadev.Counters(os.Getenv("RDMARPC_TEST_DEV"), 1)
	if err != nil {
		t.Fatalf("reading the device counters: %v", err)
	}
	for _, n := range errorCounters {
		if _, ok := m[n]; !ok {
			t.Fatalf("the device has no %s counter", n)
		}
	}
	return m
}

// checkCounters fails the test if an error counter moved since before,
// and, when they were all zero before, if any is not exactly zero now.
func checkCounters(t *testing.T, before map[string]uint64) {
	t.Helper()
	after := deviceCounters(t)
	clean := true
	for _, n := range errorCounters {
		clean = clean && before[n] == 0
	}
	for _, n := range errorCounters {
		t.Logf("%s: %d (was %d)", n, after[n], before[n])
		if after[n] != before[n] || clean && after[n] != 0 {
			t.Errorf("device counter %s went from %d to %d", n, before[n], after[n])
		}
	}
	if !clean {
		t.Logf("the error counters were not zero before this test (another test provoked an RNR on purpose); checked that they did not move")
	}
}

var stressSizes = []int{0, 1, 100, 4095, 4096, 4097, 20000, 64 << 10, 1 << 20, 4 << 20}

// stressSize is the size of message i of sender s.
func stressSize(s, i int) int { return stressSizes[(s*5+i)%len(stressSizes)] }

// stamp fills a message whose first 16 bytes name its sender and sequence
// (when it is that large) and whose rest is a pattern of both.
func stamp(sender, seq, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(sender*31 + seq*7 + i)
	}
	if n >= 16 {
		binary.BigEndian.PutUint64(b, uint64(sender))
		binary.BigEndian.PutUint64(b[8:], uint64(seq))
	}
	return b
}

// TestStress runs, on tiny pools (two receive buffers of 4 KiB, two send
// slots), several connections with several senders each sending messages
// from 0 B to 4 MiB, to a receiver that holds each message a while before
// releasing it; then an RPC load of many concurrent callers through the same
// kind of pools. Every message must arrive intact, in each sender's order,
// and the device's RNR and retry-exceeded counters must not move.
func TestStress(t *testing.T) {
	ip := guestIP(t)
	before := deviceCounters(t)
	tiny := Options{BufferSize: 4096, RecvBuffers: 2, SendSlots: 2, RecvQueueBytes: 64 << 10, MaxMessageSize: 5 << 20}

	t.Run("transport", func(t *testing.T) {
		tr := New(tiny)
		const conns, senders, each = 3, 3, 12
		var wg sync.WaitGroup
		for range conns {
			client, server, _ := pair(t, tr, ip)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			t.Cleanup(cancel)
			for s := range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						msg := stamp(s, i, stressSize(s, i))
						if err := client.Send(ctx, msg); err != nil {
							t.Errorf("sender %d message %d: %v", s, i, err)
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() { // the slow receiver
				defer wg.Done()
				next := make([]int, senders)
				for n := 0; n < senders*each; n++ {
					b, err := server.Recv(ctx)
					if err != nil {
						t.Errorf("receive %d: %v", n, err)
						return
					}
					msg := b.Bytes()
					if len(msg) >= 16 {
						s, i := int(binary.BigEndian.Uint64(msg)), int(binary.BigEndian.Uint64(msg[8:]))
						for s < senders && stressSize(s, next[s]) < 16 {
							next[s]++ // too small to carry a stamp
						}
						if s >= senders || i != next[s] || !bytes.Equal(msg, stamp(s, i, len(msg))) {
							t.Errorf("message %d of sender %d out of order or corrupted (%d bytes, want #%d)", i, s, len(msg), next[min(s, senders-1)])
						} else {
							next[s]++
						}
					}
					time.Sleep(time.Duration(n%3) * time.Millisecond) // a deliberately slow consumer
					b.Release()
				}
			}()
		}
		wg.Wait()
	})

	t.Run("rpc", func(t *testing.T) {
		lis, err := New(tiny).Listen(net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := rpc.NewServer(rpc.MaxRecvMsgSize(5 << 20))
		testpb.RegisterTestServer(srv, slowEcho{})
		served := make(chan error, 1)
		go func() { served <- srv.Serve(lis) }()
		defer func() { srv.Stop(); <-served }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cc, err := rpc.Dial(ctx, "rdma://"+lis.Addr().String(), rpc.WithTransport(New(tiny)), rpc.WithMaxRecvMsgSize(5<<20))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		c := testpb.NewTestClient(cc)
		const callers, calls = 24, 4
		var wg sync.WaitGroup
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range calls {
					want := stamp(g, i, stressSizes[(g+i*3)%len(stressSizes)])
					resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: want})
					if err != nil {
						t.Errorf("caller %d call %d (%d bytes): %v", g, i, len(want), err)
						return
					}
					if !bytes.Equal(resp.Payload, want) {
						t.Errorf("caller %d call %d: wrong payload", g, i)
						return
					}
				}
			}()
		}
		wg.Wait()
	})

	checkCounters(t, before)
}

// slowEcho echoes after a short pause: a server slower than its clients.
type slowEcho struct{ testpb.UnimplementedTestServer }

func (slowEcho) Echo(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	time.Sleep(time.Duration(len(in.Payload)%3) * time.Millisecond)
	return &testpb.EchoResponse{Payload: in.Payload}, nil
}

// resources returns the device's object counts as `rdma resource show`
// prints them: "0: rxe0: pd 1 cq 2 qp 2 cm_id 0 mr 2 ctx 0 srq 0".
func resources(t *testing.T) map[string]int {
	t.Helper()
	out, err := exec.Command("rdma", "resource", "show").CombinedOutput()
	if err != nil {
		t.Skipf("rdma resource show: %v: %s", err, out)
	}
	m := map[string]int{}
	for _, f := range regexp.MustCompile(`(\w+) (\d+)`).FindAllStringSubmatch(string(out), -1) {
		n, _ := strconv.Atoi(f[2])
		m[f[1]] += n
	}
	return m
}

// TestConnectCloseLeaks opens and closes a thousand connections, each
// carrying a message both ways; afterwards the device holds no more QPs,
// CQs, MRs or PDs than before (goleak checks the goroutines).
func TestConnectCloseLeaks(t *testing.T) {
	ip := guestIP(t)
	before := resources(t)
	tr := New(Options{BufferSize: 4096, RecvBuffers: 4, SendSlots: 4})
	lis, err := tr.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n := 1000
	if testing.Short() {
		n = 100
	}
	start := time.Now()
	for i := range n {
		acc := make(chan transport.Conn, 1)
		go func() { c, _ := lis.Accept(ctx); acc <- c }()
		c, err := tr.Dial(ctx, lis.Addr().String())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		s := <-acc
		if s == nil {
			t.Fatalf("connection %d: accept failed", i)
		}
		msg := []byte(fmt.Sprint("hello ", i))
		if err := c.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
		b, err := s.Recv(ctx)
		if err != nil || !bytes.Equal(b.Bytes(), msg) {
			t.Fatalf("connection %d: %v", i, err)
		}
		b.Release()
		if err := s.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
		if b, err = c.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		b.Release()
		if i%2 == 0 { // either side may close first
			c.Close()
			s.Close()
		} else {
			s.Close()
			c.Close()
		}
	}
	t.Logf("%d connections opened, used and closed in %v", n, time.Since(start).Round(time.Millisecond))
	lis.Close()
	after := resources(t)
	for _, k := range []string{"pd", "cq", "qp", "mr"} {
		if after[k] != before[k] {
			t.Errorf("%s count %d after the connections, %d before: a leak", k, after[k], before[k])
		}
	}
	if got := tr.Counters(); got["conns_opened"] != got["conns_closed"] {
		t.Errorf("opened %d connections, closed %d", got["conns_opened"], got["conns_closed"])
	}
}
