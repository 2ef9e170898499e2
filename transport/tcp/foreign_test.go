package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// TestHTTP2Preface: a client whose first bytes are HTTP/2's client preface
// is accepted as a transport.Foreign of protocol "h2" whose byte stream
// starts after the preface, and is sent no hello; an rdmarpc client on the
// same listener still gets framing.
func TestHTTP2Preface(t *testing.T) {
	tr := New(Options{})
	lis, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	nc, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := io.WriteString(nc, http2Preface+"after"); err != nil {
		t.Fatal(err)
	}
	c, err := lis.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := c.(transport.Foreign)
	if !ok || f.Protocol() != "h2" {
		t.Fatalf("accepted %T, want a transport.Foreign of protocol h2", c)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(f.NetConn(), buf); err != nil || string(buf) != "after" {
		t.Fatalf("after the preface: %q, %v", buf, err)
	}
	if err := f.Send(ctx, []byte("x")); !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("Send on a foreign connection: %v", err)
	}
	// The client got no hello: the first bytes it reads are the server's.
	if _, err := io.WriteString(f.NetConn(), "h2 bytes"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if _, err := io.ReadFull(nc, got); err != nil || string(got) != "h2 bytes" {
		t.Fatalf("the client read %q, %v", got, err)
	}
	f.Close()
	select {
	case <-f.Done():
	default:
		t.Fatal("Done not closed by Close")
	}

	// The same listener serves rdmarpc framing.
	rc, err := tr.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sc, err := lis.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if _, ok := sc.(transport.Foreign); ok {
		t.Fatal("an rdmarpc client accepted as foreign")
	}
	if err := rc.Send(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	b, err := sc.Recv(ctx)
	if err != nil || string(b.Bytes()) != "hello" {
		t.Fatalf("Recv: %q, %v", b.Bytes(), err)
	}
	b.Release()
}

// TestBrokenPreface: a client that starts like HTTP/2 and then sends
// something else is refused, never accepted.
func TestBrokenPreface(t *testing.T) {
	lis, err := New(Options{}).Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	nc, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := io.WriteString(nc, http2Preface[:16]+"XXXXXXXX"); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := nc.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d bytes, %v; want the server to close", n, err)
	}
}

// A client whose hello is answered the way a gRPC server answers (its
// SETTINGS, here of 15 bytes, then nothing: it waits for the rest of a
// client preface) fails at once with ErrHTTP2Server, not after the
// handshake timeout; auto:// then dials the gRPC protocol.
func TestDialHTTP2Server(t *testing.T) {
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := nl.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// SETTINGS: length 6, type 4, no flags, stream 0; MAX_FRAME_SIZE 16384.
		c.Write([]byte{0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0x40, 0})
		io.Copy(io.Discard, c) // until the client closes
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err = New(Options{HandshakeTimeout: 5 * time.Minute}).Dial(ctx, nl.Addr().String())
	if !errors.Is(err, transport.ErrHTTP2Server) || !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("dial of an HTTP/2 server: %v, want ErrHTTP2Server", err)
	}
	<-done
}
