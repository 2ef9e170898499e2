package h2client

import (
	"context"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rdmarpc/rdmarpc/rpc/internal/grpcwire"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
)

// The rpc layer's connection window bounds what is handed to it over all
// streams (docs/wire.md, "The connection window"): with a window of
// 128 KiB, four streams each sent their full 56 KiB stream window get no
// more than the window plus one frame until the rpc layer grants; then
// the rest comes.
func TestRPCConnectionWindow(t *testing.T) {
	const (
		streams = 4
		perMsg  = 8 << 10
		msgs    = 7 // 7 × (5+8 KiB) fits HTTP/2's 64 KiB stream window
		window  = 128 << 10
	)
	acked := make(chan struct{})
	c := startFake(t, func(s *fakeServer) {
		var ids []uint32
		for range streams {
			ids = append(ids, next[*http2.MetaHeadersFrame](s).StreamID)
		}
		msg := append(grpcwire.AppendPrefix(nil, false, perMsg), make([]byte, perMsg)...)
		for _, id := range ids {
			s.headers(id, false, ":status", "200", "content-type", "application/grpc")
			for range msgs {
				s.fr.WriteData(id, false, msg)
			}
		}
		// The client answers the PING after it took every DATA before it.
		s.fr.WritePing(false, [8]byte{1})
		for !next[*http2.PingFrame](s).IsAck() {
		}
		close(acked)
		next[*http2.GoAwayFrame](s)
	})
	send(t, c, wire.AppendSettings(nil, wire.Settings{ConnectionWindow: window}))
	for i := range streams {
		send(t, c, wire.AppendOpen(nil, uint64(1+2*i), 0, 0, "/test.S/M", nil))
	}
	select {
	case <-acked:
	case <-time.After(time.Minute):
		t.Fatal("the server's PING was never answered")
	}
	// take reads frames for the rpc layer within ctx: the MESSAGEs' bytes
	// and count, up to max messages.
	take := func(ctx context.Context, max int) (n, frames int) {
		for frames < max {
			b, err := c.Recv(ctx)
			if err != nil {
				return n, frames
			}
			h, _, err := wire.ParseHeader(b.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if h.Kind == wire.KindMessage {
				n += len(b.Bytes())
				frames++
			}
			b.Release()
		}
		return n, frames
	}
	done, cancel := context.WithCancel(context.Background())
	cancel() // what is already there, no more
	n, frames := take(done, streams*msgs)
	if frame := wire.HeaderLen + perMsg; n == 0 || n >= window+frame {
		t.Fatalf("%d bytes (%d messages) handed over before any grant; want some, and less than the window (%d) plus one frame (%d)", n, frames, window, frame)
	}
	send(t, c, wire.AppendWindow(nil, 0, uint32(n)))
	// The rest comes now.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, more := take(ctx, streams*msgs-frames); frames+more != streams*msgs {
		t.Fatalf("%d messages handed over after the grant, want %d", frames+more, streams*msgs)
	}
}
