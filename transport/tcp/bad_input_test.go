package tcp

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/transport"
)

func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.InfoLevel)
	return zap.New(core), logs
}

// serveEcho accepts connections on lis and echoes messages until lis closes.
func serveEcho(t *testing.T, lis transport.Listener) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					b, err := c.Recv(context.Background())
					if err != nil {
						return
					}
					err = c.Send(context.Background(), b.Bytes())
					b.Release()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { lis.Close(); <-done })
}

// checkServing proves the listener still serves a well-behaved client.
func checkServing(t *testing.T, tr *Transport, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := tr.Dial(ctx, addr)
	if err != nil {
		t.Fatalf("a good client cannot connect any more: %v", err)
	}
	defer c.Close()
	if err := c.Send(ctx, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	b, err := c.Recv(ctx)
	if err != nil || string(b.Bytes()) != "ping" {
		t.Fatalf("echo after bad peer: %v", err)
	}
	b.Release()
}

func TestRefusesBadHello(t *testing.T) {
	valid := hello{version: version, max: 1 << 20}.encode()
	wrongVersion := valid
	binary.BigEndian.PutUint16(wrongVersion[4:], 7)
	tiny := valid
	binary.BigEndian.PutUint32(tiny[8:], 10)
	flags := valid
	flags[7] = 1
	cases := []struct {
		name  string
		hello []byte
		want  string
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\n"), "not an rdmarpc tcp peer"},
		{"wrong version", wrongVersion[:], "version 7"},
		{"tiny limit", tiny[:], "below the minimum"},
		{"unknown flags", flags[:], "unknown hello flags"},
		{"truncated", valid[:9], "no hello from peer"},
	}
	log, logs := observed()
	tr := New(Options{Logger: log, HandshakeTimeout: 300 * time.Millisecond})
	lis, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, lis)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := logs.Len()
			nc, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tc.hello); err != nil {
				t.Fatal(err)
			}
			// The listener answers with its own hello, then closes on us.
			_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, nc); err != nil {
				t.Fatalf("listener did not close the bad connection: %v", err)
			}
			// Exactly one log line, naming the reason.
			var got []string
			for _, e := range logs.All()[before:] {
				got = append(got, e.Message+": "+e.ContextMap()["error"].(string))
			}
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Fatalf("log lines %q, want one containing %q", got, tc.want)
			}
			checkServing(t, tr, lis.Addr().String())
		})
	}
}

func TestClientRefusesBadServerHello(t *testing.T) {
	nl, err := net.Listen("tcp", "127.0.0.1:0")
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
		_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9\r\n"))
		_, _ = io.Copy(io.Discard, c)
	}()
	_, err = New(Options{}).Dial(context.Background(), nl.Addr().String())
	if !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "not an rdmarpc tcp peer") {
		t.Fatalf("Dial to a non-rdmarpc server = %v, want a protocol error saying so", err)
	}
}

// rawPeer connects to lis and completes the hello by hand, so the test can
// then write arbitrary bytes as frames.
func rawPeer(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h := hello{version: version, max: 1 << 20}.encode()
	if _, err := nc.Write(h[:]); err != nil {
		t.Fatal(err)
	}
	var theirs [helloLen]byte
	if _, err := io.ReadFull(nc, theirs[:]); err != nil {
		t.Fatal(err)
	}
	return nc
}

func TestOversizedFrameClosesOnlyThatConnection(t *testing.T) {
	log, logs := observed()
	tr := New(Options{Logger: log, MaxMessageSize: 64 << 10})
	lis, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	nc := rawPeer(t, lis.Addr().String())
	defer nc.Close()
	srv, err := lis.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// A good frame, then a header announcing 4 GiB-1 with nothing behind it.
	var frames bytes.Buffer
	frames.Write([]byte{0, 0, 0, 2, 'o', 'k'})
	frames.Write([]byte{0xff, 0xff, 0xff, 0xff})
	if _, err := nc.Write(frames.Bytes()); err != nil {
		t.Fatal(err)
	}
	b, err := srv.Recv(ctx)
	if err != nil || string(b.Bytes()) != "ok" {
		t.Fatalf("first frame: %v", err)
	}
	b.Release()
	_, err = srv.Recv(ctx)
	if !errors.Is(err, transport.ErrClosed) || !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "over the 65536-byte limit") {
		t.Fatalf("Recv after an oversized frame header = %v, want a closed connection naming the limit", err)
	}
	if n := logs.FilterMessage("closing connection").Len(); n != 1 {
		t.Fatalf("%d log lines for the oversized frame, want 1", n)
	}
	// The listener still serves others.
	serveEcho(t, lis)
	checkServing(t, tr, lis.Addr().String())
}

func TestTLS(t *testing.T) {
	serverCfg, clientCfg := testTLSConfigs(t)
	srvTr := New(Options{TLS: serverCfg})
	lis, err := srvTr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, lis)
	checkServing(t, New(Options{TLS: clientCfg}), lis.Addr().String())

	// A client without TLS is refused; the listener goes on.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := New(Options{HandshakeTimeout: time.Second}).Dial(ctx, lis.Addr().String()); err == nil {
		c.Close()
		t.Fatal("plain client connected to a TLS listener")
	}
	// A client that does not trust the server's certificate is refused.
	if c, err := New(Options{TLS: &tls.Config{ServerName: "localhost"}}).Dial(ctx, lis.Addr().String()); err == nil {
		c.Close()
		t.Fatal("client accepted an untrusted certificate")
	}
	checkServing(t, New(Options{TLS: clientCfg}), lis.Addr().String())
}

// TestStalledFrameCloses: a peer that stops in the middle of a frame (its
// header, or its body) is closed after StallTimeout with one log line,
// while a connection that is idle between frames stays open: the bound is
// on a frame in progress, not on silence. (Issue 20 item 4: such a peer
// held its connection until the server keepalive's two hours.)
func TestStalledFrameCloses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"in the header", []byte{0, 0}},
		{"in the body", []byte{0, 0, 0, 100, 'p', 'a', 'r', 't'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, logs := observed()
			const stall = 50 * time.Millisecond
			tr := New(Options{Logger: log, StallTimeout: stall})
			lis, err := tr.Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			idle := rawPeer(t, lis.Addr().String())
			defer idle.Close()
			idleSrv, err := lis.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer idleSrv.Close()
			nc := rawPeer(t, lis.Addr().String())
			defer nc.Close()
			srv, err := lis.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			if _, err := nc.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			_, err = srv.Recv(ctx)
			if !errors.Is(err, transport.ErrClosed) || !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "stopped in the middle of a message") {
				t.Fatalf("Recv from a peer stalled %s = %v, want a closed connection saying it stalled", tc.name, err)
			}
			if n := logs.FilterMessage("closing connection").Len(); n != 1 {
				t.Fatalf("%d log lines for the stalled peer, want 1", n)
			}
			// The idle connection, silent as long, has had no frame
			// started: it is open, and a frame on it arrives.
			select {
			case <-idleSrv.Done():
				t.Fatal("an idle connection was closed as stalled")
			default:
			}
			if _, err := idle.Write([]byte{0, 0, 0, 2, 'o', 'k'}); err != nil {
				t.Fatal(err)
			}
			b, err := idleSrv.Recv(ctx)
			if err != nil || string(b.Bytes()) != "ok" {
				t.Fatalf("a frame after idling: %v", err)
			}
			b.Release()
		})
	}
}
