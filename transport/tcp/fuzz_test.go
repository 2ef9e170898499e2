package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

func FuzzHello(f *testing.F) {
	good := hello{version: version, max: 64 << 20}.encode()
	f.Add(good[:])
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add(good[:10])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		// Whatever is accepted survives a round trip.
		again := h.encode()
		if h2, err := decodeHello(again[:]); err != nil || h2 != h {
			t.Fatalf("round trip of %+v: %+v, %v", h, h2, err)
		}
	})
}

// frames encodes messages as the wire does.
func frames(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(m)))
		b = append(b, m...)
	}
	return b
}

// FuzzFrames feeds arbitrary bytes, after a valid hello, to a real
// connection's reader and checks it delivers exactly the whole frames an
// independent parse finds, then fails cleanly: no panic, no hang, and
// memory for frames in proportion to the input (O(n) for n bytes), whatever
// lengths it announces.
func FuzzFrames(f *testing.F) {
	f.Add(frames([]byte("hello"), nil, []byte("world")))
	f.Add(frames(bytes.Repeat([]byte{7}, 1000)))
	f.Add([]byte{0, 0, 0, 5, 'a', 'b'})      // truncated body
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1}) // over the limit
	f.Add([]byte{0, 0})                      // truncated header
	f.Add([]byte{0, 0x10, 0, 0, 'a'})        // announces the whole limit, sends a byte
	f.Add(frames(bytes.Repeat([]byte{1}, 70000))[:40000])
	// A limit well above what an input holds: a reader that sized buffers
	// from the announced length would allocate up to 1 MiB for a few bytes.
	const max = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		// Independent parse: the frames a correct reader must deliver.
		var want [][]byte
		rest := data
		for len(rest) >= 4 {
			n := int(binary.BigEndian.Uint32(rest))
			if n > max || len(rest)-4 < n {
				break
			}
			want = append(want, rest[4:4+n])
			rest = rest[4+n:]
		}
		a, b := net.Pipe()
		o := Options{MaxMessageSize: max, CloseGrace: time.Second}.withDefaults()
		c := newConn(b, &o, max, nil, nil)
		defer c.Close()
		go func() {
			_, _ = a.Write(data)
			a.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 0; ; i++ {
			m, err := c.Recv(ctx)
			if err != nil {
				if !errors.Is(err, transport.ErrClosed) {
					t.Fatalf("after %d frames: %v, want ErrClosed", i, err)
				}
				if i != len(want) {
					t.Fatalf("delivered %d frames, want %d", i, len(want))
				}
				// The reader has stopped (recvq is closed): its count is final.
				if got, limit := c.frameBytes.Load(), frameAllocBound(len(data)); got > limit {
					t.Fatalf("%d input bytes: the reader allocated %d bytes for frames, over the O(n) bound %d", len(data), got, limit)
				}
				return
			}
			if i >= len(want) || !bytes.Equal(m.Bytes(), want[i]) {
				t.Fatalf("frame %d: got %d bytes, not what the stream holds", i, m.Len())
			}
			m.Release()
		}
	})
}

// frameAllocBound is what the reader may allocate for frames out of n bytes
// of input: each complete frame at most twice its size (pool classes are
// powers of two) plus a small-class minimum, a growing frame at most a few
// times what arrived of it, and one chunk ahead of the bytes for the last,
// incomplete frame.
func frameAllocBound(n int) uint64 { return uint64(readChunk + 32*n + 64) }
