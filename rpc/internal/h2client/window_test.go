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

// A transfer that fills the stream window in a round trip grows it (BDP
// estimation, as gRPC-go's): the client PINGs on the first DATA, and on
// the ack announces a larger SETTINGS_INITIAL_WINDOW_SIZE, within the
// connection's window, which bounds what the connection holds.
func TestBDPGrowsStreamWindow(t *testing.T) {
	grown := make(chan uint32, 1)
	c := startFake(t, func(s *fakeServer) {
		h := next[*http2.MetaHeadersFrame](s)
		s.headers(h.StreamID, false, ":status", "200", "content-type", "application/grpc")
		// One message of 1 MiB, of which the stream window's worth now.
		data := append(grpcwire.AppendPrefix(nil, false, 1<<20), make([]byte, StreamWindow-grpcwire.PrefixLen)...)
		for len(data) > 0 {
			n := min(len(data), 16384)
			s.fr.WriteData(h.StreamID, false, data[:n])
			data = data[n:]
		}
		for {
			p := next[*http2.PingFrame](s)
			if p == nil {
				return
			}
			if !p.IsAck() && p.Data == grpcwire.BDPPing {
				s.fr.WritePing(true, p.Data)
				break
			}
		}
		for {
			f := next[*http2.SettingsFrame](s)
			if f == nil {
				return
			}
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok && v > StreamWindow {
				grown <- v
				break
			}
		}
		next[*http2.GoAwayFrame](s)
	})
	send(t, c, request(1, nil))
	select {
	case v := <-grown:
		if v != 2*StreamWindow {
			t.Fatalf("the window grew to %d, want twice the sample (%d)", v, 2*StreamWindow)
		}
	case <-time.After(time.Minute):
		t.Fatal("the stream window never grew")
	}
}
