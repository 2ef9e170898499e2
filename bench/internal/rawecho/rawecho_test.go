package rawecho

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEchoes: every caller gets back exactly the bytes it sent, at sizes
// around the buffers' growth, with callers sharing the client; the pool
// holds no more connections than callers.
func TestEchoes(t *testing.T) {
	srv, err := Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c := Dial(srv.Addr())
	defer c.Close()
	const callers = 4
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for i, size := range []int{0, 1, 64, 511, 512, 4096, 64 << 10, 100, 1 << 20} {
				p := bytes.Repeat([]byte{byte(w), byte(i), 7}, size/3+1)[:size]
				resp, err := c.Say(context.Background(), &echopb.SayRequest{Payload: p})
				if err != nil {
					t.Errorf("caller %d, %d B: %v", w, size, err)
					return
				}
				if !bytes.Equal(resp.GetPayload(), p) {
					t.Errorf("caller %d, %d B: echo differs (%d B back)", w, size, len(resp.GetPayload()))
				}
			}
		})
	}
	wg.Wait()
	if n := c.pool.Len(); n < 1 || n > callers {
		t.Errorf("pool holds %d connections for %d callers", n, callers)
	}
	if _, err := c.Say(context.Background(), &echopb.SayRequest{Message: "x"}); err == nil {
		t.Error("a Message was accepted although it would not travel")
	}
}

// TestServerRefusesHugeFrame: a length over MaxFrame closes the connection
// instead of sizing a buffer from it.
func TestServerRefusesHugeFrame(t *testing.T) {
	srv, err := Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	nc, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], MaxFrame+1)
	if _, err := nc.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	if n, err := nc.Read(make([]byte, 1)); err == nil {
		t.Fatalf("server answered %d bytes to an oversized frame", n)
	}
}

func TestReadFrame(t *testing.T) {
	for _, tc := range []struct {
		in      []byte
		payload []byte
		err     error
	}{
		{[]byte{0, 0, 0, 3, 'a', 'b', 'c'}, []byte("abc"), nil},
		{[]byte{0, 0, 0, 0}, []byte{}, nil},
		{[]byte{}, nil, io.EOF},
		{[]byte{0, 0}, nil, io.ErrUnexpectedEOF},
		{[]byte{0, 0, 0, 3, 'a'}, nil, io.ErrUnexpectedEOF},
		{[]byte{0xff, 0xff, 0xff, 0xff}, nil, nil},
	} {
		got, err := readFrame(bytes.NewReader(tc.in), nil)
		if tc.payload == nil {
			if err == nil || (tc.err != nil && !errors.Is(err, tc.err)) {
				t.Errorf("readFrame(%x) = %v, want error %v", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got[headerLen:], tc.payload) {
			t.Errorf("readFrame(%x) = %x, %v; want %x", tc.in, got, err, tc.payload)
		}
	}
}

// FuzzReadFrame: any input gives a frame that re-encodes to its prefix, or
// an error; never a buffer larger than the cap.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0x10, 0, 0, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		var buf []byte
		for {
			var err error
			buf, err = readFrame(r, buf)
			if cap(buf) > headerLen+MaxFrame {
				t.Fatalf("buffer of %d bytes", cap(buf))
			}
			if err != nil {
				return
			}
			again := append([]byte(nil), buf...)
			putHeader(again)
			if !bytes.Equal(again, buf) {
				t.Fatalf("frame %x re-encodes as %x", buf, again)
			}
		}
	})
}
