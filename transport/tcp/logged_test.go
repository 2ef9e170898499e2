package tcp

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"net"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// sendGarbage connects, sends a bad hello, and waits for the listener to
// close the connection.
func sendGarbage(t *testing.T, addr string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil {
		t.Fatalf("listener did not close the bad connection: %v", err)
	}
}

// The registered transport has no logger of its own; the server that
// serves its listener hands over one, and refusals reach it: a bad hello,
// and an oversized frame on an accepted connection.
func TestListenerTakesTheServersLogger(t *testing.T) {
	lis, err := New(Options{}).Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	logged, ok := lis.(transport.Logged)
	if !ok {
		t.Fatalf("%T does not implement transport.Logged", lis)
	}
	log, logs := observed()
	logged.SetLogger(log)

	sendGarbage(t, lis.Addr().String())
	for logs.FilterMessage("refused connection").Len() != 1 {
		time.Sleep(time.Millisecond) // the line follows the close
	}
	if e := logs.All()[0]; e.LoggerName != "tcp" {
		t.Errorf("logger name %q, want tcp", e.LoggerName)
	}

	nc := rawPeer(t, lis.Addr().String())
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := lis.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := nc.Write(binary.BigEndian.AppendUint32(nil, math.MaxUint32)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Recv(ctx); err == nil {
		t.Fatal("an oversized frame was delivered")
	}
	if n := logs.FilterMessage("closing connection").Len(); n != 1 {
		t.Fatalf("%d lines for the oversized frame, want 1", n)
	}
}

// A flood of bad peers writes a bounded number of lines: a burst, then
// about one a second, each saying how many it stood for.
func TestRefusalsAreRateLimited(t *testing.T) {
	log, logs := observed()
	tr := New(Options{Logger: log})
	lis, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, lis)
	const flood = 200
	start := time.Now()
	for range flood {
		sendGarbage(t, lis.Addr().String())
	}
	// Each refusal is logged after its close: wait until the listener has
	// handled them all, which a good client's service shows.
	checkServing(t, tr, lis.Addr().String())
	elapsed := time.Since(start)
	lines := logs.FilterMessage("refused connection").Len()
	limit := 10 + int(elapsed.Seconds()) + 2
	if lines == 0 || lines > limit || lines >= flood {
		t.Fatalf("%d lines for %d refusals in %v, want between 1 and %d", lines, flood, elapsed, limit)
	}
}

// Over MaxConnections a connection is closed at once, with a line; when one
// ends, the next is served.
func TestMaxConnections(t *testing.T) {
	log, logs := observed()
	tr := New(Options{Logger: log, MaxConnections: 2})
	lis, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveEcho(t, lis)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var held []transport.Conn
	for range 2 {
		c, err := tr.Dial(ctx, lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if c, err := tr.Dial(ctx, lis.Addr().String()); err == nil {
		c.Close()
		t.Fatal("a third connection was served over MaxConnections 2")
	}
	if n := logs.FilterMessage("refused connection: at the connection limit").Len(); n != 1 {
		t.Fatalf("%d lines for a connection over the limit, want 1", n)
	}
	held[0].Close()
	// The server notices the close when it reads the end of the stream;
	// until then the limit still counts it.
	for {
		c, err := tr.Dial(ctx, lis.Addr().String())
		if err == nil {
			c.Close()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no connection served after one of two ended: %v", err)
		}
	}
	held[1].Close()
}
