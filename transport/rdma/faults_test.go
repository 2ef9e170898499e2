package rdma

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// pair returns a connected client and server over tr, closed at the end.
func pair(t *testing.T, tr *Transport, ip string) (client, server *conn, lis transport.Listener) {
	t.Helper()
	c, srv, lis := connectPair(t, tr, tr, ip)
	return c.(*conn), srv.(*conn), lis
}

// connectPair connects a client of cli to a server of srv listening on ip,
// all closed at the end.
func connectPair(tb testing.TB, cli, srv *Transport, ip string) (client, server transport.Conn, lis transport.Listener) {
	tb.Helper()
	lis, err := srv.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lis.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acc := make(chan transport.Conn, 1)
	go func() {
		c, _ := lis.Accept(ctx)
		acc <- c
	}()
	c, err := cli.Dial(ctx, lis.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	s := <-acc
	if s == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { s.Close() })
	return c, s, lis
}

// echoOnce proves a transport still connects and carries a message.
func echoOnce(t *testing.T, tr *Transport, lis transport.Listener) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acc := make(chan transport.Conn, 1)
	go func() {
		c, _ := lis.Accept(ctx)
		acc <- c
	}()
	c, err := tr.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatalf("a good client cannot connect any more: %v", err)
	}
	defer c.Close()
	s := <-acc
	if s == nil {
		t.Fatal("accept failed")
	}
	defer s.Close()
	if err := c.Send(ctx, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	b, err := s.Recv(ctx)
	if err != nil || string(b.Bytes()) != "ping" {
		t.Fatalf("message after the bad peer: %v", err)
	}
	b.Release()
}

func TestHandshakeRefusals(t *testing.T) {
	ip := guestIP(t)
	core, logs := observer.New(zap.InfoLevel)
	tr := New(Options{Logger: zap.New(core), HandshakeTimeout: 2 * time.Second})
	lis, err := tr.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	good := hello{qpn: 7, psn: 1, mtu: 1024, bufSize: 4096, recvs: 4, maxMessage: 1 << 20}
	mut := func(f func(b []byte)) []byte { b := good.encode(); f(b); return b }
	cases := []struct {
		name  string
		send  []byte
		reply string // what the refusal says; "" when the peer only hangs up
	}{
		{"garbage", []byte(strings.Repeat("GET / HTTP/1.1\r\nHost: x\r\n", 3))[:helloLen], "not an rdmarpc rdma peer"},
		{"wrong version", mut(func(b []byte) { binary.BigEndian.PutUint16(b[4:], 9) }), "version 9"},
		{"absurd receives", mut(func(b []byte) { binary.BigEndian.PutUint32(b[44:], 1<<30) }), "receive buffers"},
		{"absurd buffers", mut(func(b []byte) { binary.BigEndian.PutUint32(b[40:], 1<<31) }), "receive buffers of"},
		{"absurd max message", mut(func(b []byte) { binary.BigEndian.PutUint32(b[48:], 1<<31) }), "maximum message"},
		{"truncated", good.encode()[:10], ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := logs.FilterMessage("refused connection").Len()
			nc, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, err := io.ReadAll(nc)
			if err != nil {
				t.Fatalf("the listener did not hang up: %v", err)
			}
			if tc.reply != "" {
				if len(got) < 6 || string(got[:4]) != refuseMagic || !strings.Contains(string(got[6:]), tc.reply) {
					t.Fatalf("answer %q, want a refusal saying %q", got, tc.reply)
				}
			}
			if n := logs.FilterMessage("refused connection").Len() - before; n != 1 {
				t.Fatalf("%d log lines for one refused peer, want 1", n)
			}
			echoOnce(t, tr, lis)
		})
	}

	// A client refused by a server gets the server's reason.
	nl, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	go func() {
		c, err := nl.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.ReadFull(c, make([]byte, helloLen))
		_, _ = c.Write(encodeRefusal("go away: testing"))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := tr.Dial(ctx, nl.Addr().String()); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "go away: testing") {
		t.Fatalf("dial to a refusing server: %v", err)
	}
}

// postRaw posts a send that ignores the credit protocol: the misbehaving
// peer the tests need.
func (c *conn) postRaw(t *testing.T, k kind, grant int, payload []byte) {
	t.Helper()
	c.mu.Lock()
	slot, _, w := c.mem.take()
	if w != nil {
		c.mu.Unlock()
		c.mem.forget(w, true)
		t.Fatal("no send slot free for a raw post")
	}
	c.avail--
	c.sqFree--
	mr, off, mem := c.mem.locate(slot)
	copy(mem, payload)
	wr := verbs.SendWR{ID: c.seq, MR: mr, Offset: off,
		Length: uint32(len(payload)), Signaled: true, Imm: encodeImm(k, grant), HasImm: true}
	c.enqueueLocked(wr, slot)
	c.mu.Unlock()
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
}

// TestCreditViolations: a peer that grants credits it does not owe, or
// sends without credits, gets its connection closed; the process and the
// listener go on.
func TestCreditViolations(t *testing.T) {
	ip := guestIP(t)
	cases := []struct {
		name   string
		attack func(t *testing.T, c *conn)
		want   string
	}{
		{"overgrant", func(t *testing.T, c *conn) { c.postRaw(t, kindCredit, 1000, nil) }, "returned 1000 credits"},
		{"credit-only below the threshold", func(t *testing.T, c *conn) { c.postRaw(t, kindCredit, 0, nil) }, "below the threshold"},
		{"sending without credits", func(t *testing.T, c *conn) {
			for range 3 { // the server has 2 data receives and does not read
				c.postRaw(t, kindMessage, 0, []byte("x"))
			}
		}, "all 2 credits out"},
		{"orphan fragment", func(t *testing.T, c *conn) { c.postRaw(t, kindLast, 0, []byte("x")) }, "outside a fragmented message"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			tr := New(Options{Logger: zap.New(core), BufferSize: 4096, RecvBuffers: 2, SendSlots: 4})
			client, server, lis := pair(t, tr, ip)
			if tc.name == "overgrant" {
				// The server has sent one message, so one credit can
				// legally come back; a thousand cannot.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := server.Send(ctx, []byte("one")); err != nil {
					t.Fatal(err)
				}
			}
			tc.attack(t, client)
			select {
			case <-server.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the server kept a connection whose peer broke the credit protocol")
			}
			err := server.closeErr()
			if !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("server closed with %v, want a protocol violation saying %q", err, tc.want)
			}
			select {
			case <-client.Done(): // the server's close ends the bootstrap connection
			case <-time.After(30 * time.Second):
				t.Fatal("the offending client was not disconnected")
			}
			if n := logs.FilterMessage("closing connection: peer broke the protocol").Len(); n != 1 {
				t.Fatalf("%d log lines, want 1", n)
			}
			echoOnce(t, tr, lis)
		})
	}
}

// The helper process of TestPeerDiesMidCall: an RPC server whose Block
// method announces itself and never returns.
type blockForever struct{ testpb.UnimplementedTestServer }

func (blockForever) Block(ctx context.Context, in *testpb.BlockRequest) (*testpb.BlockResponse, error) {
	os.Stdout.WriteString("blocked\n")
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestHelperServer(t *testing.T) {
	if os.Getenv("RDMARPC_HELPER") != "server" {
		t.Skip("the server half of TestPeerDiesMidCall, run as a child process")
	}
	lis, err := New(Options{}).Listen(net.JoinHostPort(os.Getenv("RDMARPC_TEST_IP"), "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer()
	testpb.RegisterTestServer(s, blockForever{})
	os.Stdout.WriteString(lis.Addr().String() + "\n")
	_ = s.Serve(lis) // until killed
}

// TestPeerDiesMidCall: the server process is killed (SIGKILL) while a call
// is in flight; the client's call fails with Unavailable within a bounded
// time, without keepalive's help (the bootstrap connection tells).
func TestPeerDiesMidCall(t *testing.T) {
	guestIP(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServer$")
	cmd.Env = append(os.Environ(), "RDMARPC_HELPER=server")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatal("the helper server printed no address")
	}
	addr := lines.Text()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc, err := rpc.Dial(ctx, "rdma://"+addr, rpc.WithTransport(New(Options{})),
		rpc.WithKeepalive(rpc.Keepalive{Time: -1})) // keepalive off: the transport must notice
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	done := make(chan error, 1)
	go func() {
		_, err := testpb.NewTestClient(cc).Block(ctx, &testpb.BlockRequest{})
		done <- err
	}()
	if !lines.Scan() || lines.Text() != "blocked" {
		t.Fatalf("the helper did not start the call: %q", lines.Text())
	}
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if ctx.Err() != nil {
		t.Fatal("the call outlived its peer until the test's deadline")
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("call to a killed server: %v, want Unavailable", err)
	}
	t.Logf("the call failed %v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
}
