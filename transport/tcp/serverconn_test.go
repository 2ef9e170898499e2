package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// TestServerConn: a socket accepted by another listener, whose first bytes
// it read (as the RDMA transport's listener reads a hello's magic), is
// served with ServerConn: messages flow both ways; a peer whose bytes are
// not a hello is refused with ErrProtocol and its socket closed.
func TestServerConn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	tr := New(Options{})
	type result struct {
		c   transport.Conn
		err error
	}
	serve := func() <-chan result {
		ch := make(chan result, 1)
		go func() {
			nc, err := nl.Accept()
			if err != nil {
				ch <- result{nil, err}
				return
			}
			head := make([]byte, 4)
			if _, err := io.ReadFull(nc, head); err != nil {
				nc.Close()
				ch <- result{nil, err}
				return
			}
			c, err := tr.ServerConn(ctx, nc, head, nil, nil)
			ch <- result{c, err}
		}()
		return ch
	}

	accepted := serve()
	client, err := tr.Dial(ctx, nl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	r := <-accepted
	if r.err != nil {
		t.Fatalf("ServerConn: %v", r.err)
	}
	defer r.c.Close()
	if err := client.Send(ctx, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	b, err := r.c.Recv(ctx)
	if err != nil || string(b.Bytes()) != "ping" {
		t.Fatalf("server got %q, %v", b.Bytes(), err)
	}
	b.Release()
	if err := r.c.Send(ctx, []byte("pong")); err != nil {
		t.Fatal(err)
	}
	if b, err = client.Recv(ctx); err != nil || string(b.Bytes()) != "pong" {
		t.Fatalf("client got %q, %v", b.Bytes(), err)
	}
	b.Release()

	accepted = serve()
	bad, err := net.Dial("tcp", nl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Write([]byte("RRPT but then not a hello")); err != nil {
		t.Fatal(err)
	}
	if r := <-accepted; !errors.Is(r.err, transport.ErrProtocol) {
		t.Fatalf("ServerConn of a bad hello: %v, want ErrProtocol", r.err)
	}
	// The server's hello may come first; then the socket ends.
	_ = bad.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, bad); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the refused socket is still open")
	}
}
