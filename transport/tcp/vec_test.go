package tcp

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

// vecParts is a frame in three parts the caller keeps: a small head, a
// large body and a small tail, filled with seed's pattern; whole is their
// concatenation, copied.
func vecParts(seed byte, body int) (parts [][]byte, whole []byte) {
	parts = [][]byte{make([]byte, 9), make([]byte, body), make([]byte, 3)}
	for i, p := range parts {
		for j := range p {
			p[j] = seed + byte(i*7+j*13+j>>8)
		}
		whole = append(whole, p...)
	}
	return parts, whole
}

// scribble overwrites parts, as a caller reusing its memory would once
// SendVec has returned.
func scribble(parts [][]byte) {
	for _, p := range parts {
		for j := range p {
			p[j] = 0xee
		}
	}
}

// In a ping-pong of SendVec frames each sender writes its own frame from
// its parts, so nothing is copied at either end (the white-box count of
// copied bytes stays 0 while every frame is written directly), and every
// frame arrives whole.
func TestSendVecWritesThePartsThemselves(t *testing.T) {
	ctx, cli, srv := pairConns(t, New(Options{}))
	if cli.w.d == nil {
		t.Skip("no direct writes on this platform")
	}
	// Room for a whole frame in each socket, so that no write is partial.
	for _, c := range []*conn{cli, srv} {
		if err := c.nc.(*net.TCPConn).SetWriteBuffer(4 << 20); err != nil {
			t.Fatal(err)
		}
	}
	const rounds = 50
	for i := range rounds {
		parts, want := vecParts(byte(i), 64<<10)
		if err := cli.SendVec(ctx, parts); err != nil {
			t.Fatal(err)
		}
		m, err := srv.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Bytes(), want) {
			t.Fatalf("round %d: the server received other bytes", i)
		}
		err = srv.SendVec(ctx, [][]byte{m.Bytes()[:100], m.Bytes()[100:]})
		m.Release()
		if err != nil {
			t.Fatal(err)
		}
		if m, err = cli.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Bytes(), want) {
			t.Fatalf("round %d: the echo differs", i)
		}
		m.Release()
	}
	for _, c := range []*conn{cli, srv} {
		direct, handedOff, idle := writeCounts(c)
		if copied := c.vecCopied.Load(); copied != 0 || direct != rounds || handedOff != 0 || !idle {
			t.Errorf("%v: %d bytes copied, %d frames written by their senders, %d hand-offs (idle %v); want 0, %d and 0",
				c.LocalAddr(), copied, direct, handedOff, idle, rounds)
		}
	}
}

// A SendVec frame that cannot be written by its sender at once is copied
// before SendVec returns: behind a frame the writer goroutine is still
// writing to a peer that does not read, as the second of a burst (nothing
// heard since the last direct write), and the part of a direct write the
// socket did not take. The caller overwrites its parts as soon as SendVec
// returns, and the peer still receives what was sent. Under -race, a
// writer reading the caller's memory after the return is a reported race.
func TestSendVecCopiesWhatWaits(t *testing.T) {
	t.Run("queued", func(t *testing.T) {
		nc, srv := acceptRaw(t, New(Options{SendQueueBytes: 64 << 20}))
		smallBuffers(t, nc, srv)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// The writer goroutine takes over this one and waits for the peer.
		first := bytes.Repeat([]byte{0xab}, 1<<20)
		if err := srv.Send(ctx, first); err != nil {
			t.Fatal(err)
		}
		var want [][]byte
		total := 0
		for i := range 3 {
			parts, whole := vecParts(byte(i), 100<<10)
			if err := srv.SendVec(ctx, parts); err != nil {
				t.Fatal(err)
			}
			scribble(parts)
			want = append(want, whole)
			total += len(whole)
		}
		if copied := srv.vecCopied.Load(); copied != uint64(total) {
			t.Errorf("%d bytes copied, want all %d of the queued frames", copied, total)
		}
		r := &frameReader{r: nc}
		if m, err := r.next(); err != nil || !bytes.Equal(m, first) {
			t.Fatalf("first frame: %d bytes, %v", len(m), err)
		}
		for i, w := range want {
			m, err := r.next()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m, w) {
				t.Fatalf("frame %d: the peer received other bytes than were sent", i)
			}
		}
	})
	t.Run("burst", func(t *testing.T) {
		nc, srv := acceptRaw(t, New(Options{}))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// The first frame is the first since the hello: its sender writes
		// it. The second follows with nothing heard in between: it goes to
		// the writer goroutine, copied.
		var want [][]byte
		for i := range 2 {
			parts, whole := vecParts(byte(i), 1<<10)
			if err := srv.SendVec(ctx, parts); err != nil {
				t.Fatal(err)
			}
			scribble(parts)
			want = append(want, whole)
		}
		r := &frameReader{r: nc}
		for i, w := range want {
			m, err := r.next()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m, w) {
				t.Fatalf("frame %d: the peer received other bytes than were sent", i)
			}
		}
		if copied := srv.vecCopied.Load(); srv.w.d != nil && copied != uint64(len(want[1])) {
			t.Errorf("%d bytes copied, want the second frame's %d", copied, len(want[1]))
		}
	})
	t.Run("partial", func(t *testing.T) {
		nc, srv := acceptRaw(t, New(Options{SendQueueBytes: 64 << 20}))
		if srv.w.d == nil {
			t.Skip("no direct writes on this platform")
		}
		smallBuffers(t, nc, srv)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// Its sender writes it, and the socket takes only part of 1 MiB.
		parts, want := vecParts(7, 1<<20-100)
		if err := srv.SendVec(ctx, parts); err != nil {
			t.Fatal(err)
		}
		scribble(parts)
		copied := srv.vecCopied.Load()
		if copied == 0 || copied >= uint64(len(want)) {
			t.Errorf("%d bytes copied; want what the socket did not take of %d", copied, len(want))
		}
		m, err := (&frameReader{r: nc}).next()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m, want) {
			t.Fatal("the peer received other bytes than were sent")
		}
		if direct, handedOff, _ := writeCounts(srv); direct != 1 || handedOff != 1 {
			t.Fatalf("%d direct writes, %d hand-offs; want the partial direct write, then the writer", direct, handedOff)
		}
	})
}
