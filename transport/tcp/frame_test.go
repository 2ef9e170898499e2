package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// acceptRaw listens with tr, connects a raw peer that has done its hello,
// and returns both ends.
func acceptRaw(t *testing.T, tr *Transport) (net.Conn, *conn) {
	t.Helper()
	lis, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	nc := rawPeer(t, lis.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := lis.Accept(ctx)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	// The peer goes first, so the server's Close sees its end of stream
	// instead of waiting out the close grace.
	t.Cleanup(func() { nc.Close(); srv.Close() })
	return nc, srv.(*conn)
}

// waitReceived waits until c has read at least n bytes off its socket:
// progress, not time, decides.
func waitReceived(t *testing.T, c *conn, n uint64) {
	t.Helper()
	for c.BytesReceived() < n {
		select {
		case <-c.Done():
			t.Fatalf("connection closed after %d of %d bytes: %v", c.BytesReceived(), n, c.closeErr())
		case <-time.After(time.Millisecond):
		}
	}
}

// A peer that announces a 64 MiB frame (within the configured limit), sends
// 1 KiB of it and stalls costs the reader about that KiB (one chunk), not
// the 64 MiB it announced.
func TestStalledHugeFrameCostsLittle(t *testing.T) {
	nc, srv := acceptRaw(t, New(Options{MaxMessageSize: 64 << 20}))
	hdr := binary.BigEndian.AppendUint32(nil, 64<<20)
	if _, err := nc.Write(append(hdr, make([]byte, 1<<10)...)); err != nil {
		t.Fatal(err)
	}
	waitReceived(t, srv, helloLen+frameHeaderLen+1<<10)
	if got := srv.frameBytes.Load(); got > readChunk {
		t.Fatalf("the reader holds %d bytes for a frame of which 1 KiB arrived; want at most one %d-byte chunk", got, readChunk)
	}
}

// A frame larger than a chunk arrives whole and intact through the
// growing buffer, and costs a small multiple of its size.
func TestLargeFrameGrowsIntact(t *testing.T) {
	nc, srv := acceptRaw(t, New(Options{}))
	msg := make([]byte, 3<<20+5)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	go func() { _, _ = nc.Write(frames(msg)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := srv.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if string(b.Bytes()) != string(msg) {
		t.Fatalf("delivered %d bytes, not the %d-byte frame sent", b.Len(), len(msg))
	}
	if n := srv.frameBytes.Load(); n > 4*uint64(len(msg)) {
		t.Fatalf("the reader allocated %d bytes for one %d-byte frame", n, len(msg))
	}
}

// A 64 KiB message with its RPC header, the common large message, is read
// into one buffer: before, the header's few bytes over 64 KiB took a second,
// 128 KiB buffer and a copy of the first 64 KiB into it.
func TestSixtyFourKiBMessageInOneBuffer(t *testing.T) {
	nc, srv := acceptRaw(t, New(Options{}))
	msg := make([]byte, 64<<10+200)
	go func() { _, _ = nc.Write(frames(msg)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := srv.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	if n := srv.frameBytes.Load(); n != 128<<10 {
		t.Fatalf("the reader allocated %d bytes in buffers for a %d-byte frame, want one of 128 KiB", n, len(msg))
	}
}

// By default the transport takes what the RPC layer's default limit lets
// through, and refuses a 64 MiB frame without reading it.
func TestDefaultLimitMatchesRPC(t *testing.T) {
	tr := New(Options{})
	if tr.o.MaxMessageSize != 4<<20+64<<10 {
		t.Fatalf("default MaxMessageSize %d, want 4 MiB + 64 KiB", tr.o.MaxMessageSize)
	}
	nc, srv := acceptRaw(t, tr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The most the RPC layer sends by default (4 MiB of payload plus a
	// header) arrives whole.
	msg := make([]byte, 4<<20+1<<10)
	go func() { _, _ = nc.Write(frames(msg)) }()
	b, err := srv.Recv(ctx)
	if err != nil || b.Len() != len(msg) {
		t.Fatalf("a %d-byte frame: %v", len(msg), err)
	}
	b.Release()
	before := srv.frameBytes.Load()
	if _, err := nc.Write(binary.BigEndian.AppendUint32(nil, 64<<20)); err != nil {
		t.Fatal(err)
	}
	_, err = srv.Recv(ctx)
	want := fmt.Sprintf("over the %d-byte limit", DefaultMaxMessageSize)
	if !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Recv after a 64 MiB frame header = %v, want a protocol error %q", err, want)
	}
	if got := srv.frameBytes.Load(); got != before {
		t.Fatalf("the reader allocated %d bytes for the refused frame", got-before)
	}
}

// BytesReceived counts what arrived, parts of a frame not yet whole
// included, so a keepalive sees a slow upload as alive.
func TestBytesReceivedCountsPartialFrames(t *testing.T) {
	nc, srv := acceptRaw(t, New(Options{}))
	var act transport.Activity = srv // the server's conn implements it
	start := act.BytesReceived()
	if start < helloLen {
		t.Fatalf("BytesReceived %d after the hello, want at least %d", start, helloLen)
	}
	hdr := binary.BigEndian.AppendUint32(nil, 1<<20)
	if _, err := nc.Write(hdr); err != nil {
		t.Fatal(err)
	}
	last := start
	for i := 1; i <= 4; i++ {
		if _, err := nc.Write(make([]byte, 100<<10)); err != nil {
			t.Fatal(err)
		}
		want := start + frameHeaderLen + uint64(i)*100<<10
		waitReceived(t, srv, want)
		if got := act.BytesReceived(); got < last {
			t.Fatalf("BytesReceived went down: %d after %d", got, last)
		}
		last = act.BytesReceived()
	}
	// No message has been delivered: it is still partial.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b, err := srv.Recv(ctx); err == nil {
		b.Release()
		t.Fatal("a partial frame was delivered")
	}
}

// A dial whose context ends during the handshake reports the context's
// error, not a protocol violation by a silent peer.
func TestDialEndedByContext(t *testing.T) {
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	// A peer that accepts and never says hello.
	held := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := nl.Accept()
			if err != nil {
				close(held)
				return
			}
			held <- c
		}
	}()
	defer func() {
		nl.Close()
		for c := range held {
			c.Close()
		}
	}()
	tr := New(Options{}) // the default 10 s handshake timeout
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := tr.Dial(ctx, nl.Addr().String())
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, transport.ErrProtocol) {
			t.Fatalf("Dial = %v, want an error wrapping context.DeadlineExceeded", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := tr.Dial(ctx, nl.Addr().String())
		if !errors.Is(err, context.Canceled) || errors.Is(err, transport.ErrProtocol) {
			t.Fatalf("Dial = %v, want an error wrapping context.Canceled", err)
		}
	})
	t.Run("handshake timeout", func(t *testing.T) {
		_, err := New(Options{HandshakeTimeout: 100 * time.Millisecond}).Dial(context.Background(), nl.Addr().String())
		if !errors.Is(err, transport.ErrProtocol) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial = %v, want the protocol error of a silent peer", err)
		}
	})
}
