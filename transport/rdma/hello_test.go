package rdma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/transport"
)

func validHello() hello {
	return hello{qpn: 0x11, psn: 0xabcdef, mtu: 1024, bufSize: 64 << 10, recvs: 32, maxMessage: 64 << 20, gid: [16]byte{15: 1}}
}

func TestHelloRoundTrip(t *testing.T) {
	h := validHello()
	got, err := decodeHello(h.encode())
	if err != nil || got != h {
		t.Fatalf("%+v, %v", got, err)
	}
}

// The guaranteed window travels only with featLend: without it the bytes
// are reserved, as before lent credits.
func TestHelloGuaranteed(t *testing.T) {
	h := validHello()
	h.features, h.guaranteed = featLend, 2
	got, err := decodeHello(h.encode())
	if err != nil || got != h || got.keep() != 2 {
		t.Fatalf("%+v, %v", got, err)
	}
	h.features = 0
	if got, err := decodeHello(h.encode()); err != nil || got.guaranteed != 0 || got.keep() != 32 {
		t.Fatalf("without featLend: %+v, %v", got, err)
	}
}

func TestHelloRejects(t *testing.T) {
	mutate := func(f func(b []byte)) []byte {
		h := validHello()
		b := h.encode()
		f(b)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"short", validHello().encode()[:20], "20 bytes"},
		{"garbage", []byte(strings.Repeat("GET / HTTP/1.1\r\n", 4)), "not an rdmarpc rdma peer"},
		{"version", mutate(func(b []byte) { binary.BigEndian.PutUint16(b[4:], 3) }), "version 3"},
		{"qpn zero", mutate(func(b []byte) { binary.BigEndian.PutUint32(b[12:], 0) }), "queue pair number"},
		{"qpn wide", mutate(func(b []byte) { binary.BigEndian.PutUint32(b[12:], 1<<24) }), "queue pair number"},
		{"psn wide", mutate(func(b []byte) { binary.BigEndian.PutUint32(b[16:], 1<<24) }), "packet sequence number"},
		{"mtu", mutate(func(b []byte) { binary.BigEndian.PutUint16(b[38:], 1500) }), "path MTU 1500"},
		{"tiny buffers", mutate(func(b []byte) { binary.BigEndian.PutUint32(b[40:], 8) }), "receive buffers of 8 bytes"},
		{"huge buffers", mutate(func(b []byte) { binary.BigEndian.PutUint32(b[40:], 1<<31) }), "receive buffers of"},
		{"no receives", mutate(func(b []byte) { binary.BigEndian.PutUint32(b[44:], 0) }), "0 receive buffers"},
		{"absurd receives", mutate(func(b []byte) { binary.BigEndian.PutUint32(b[44:], 1<<30) }), "receive buffers (allowed"},
		{"absurd max", mutate(func(b []byte) { binary.BigEndian.PutUint32(b[48:], 0xFFFFFFFF) }), "maximum message"},
		{"guaranteed beyond receives", mutate(func(b []byte) {
			binary.BigEndian.PutUint32(b[8:], featLend)
			binary.BigEndian.PutUint32(b[52:], 33)
		}), "guaranteed window of 33"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeHello(tc.b)
			if !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a protocol error containing %q", err, tc.want)
			}
		})
	}
}

func FuzzHello(f *testing.F) {
	h := validHello()
	f.Add(h.encode())
	f.Add([]byte("RRPR"))
	f.Add(encodeRefusal("no"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if again, err := decodeHello(h.encode()); err != nil || again != h {
			t.Fatalf("round trip: %+v %v", again, err)
		}
	})
}

// FuzzReadReply: what a peer sends where a hello or the ready byte is
// expected (a hello, a refusal with its reason, or garbage) never panics,
// and fails only with a refusal, a protocol error or a read error.
func FuzzReadReply(f *testing.F) {
	h := validHello()
	f.Add(h.encode(), false)
	f.Add(encodeRefusal("no RDMA device serves 10.0.0.1"), false)
	f.Add([]byte{readyByte}, true)
	f.Add([]byte("RRPN\xff\xffshort"), false)
	f.Add([]byte("RRPX garbage that starts like a refusal"), true)
	tr := New(Options{})
	f.Fuzz(func(t *testing.T, in []byte, ready bool) {
		n := helloLen
		if ready {
			n = 1
		}
		b, err := tr.readReply(bytes.NewReader(in), n)
		if err != nil {
			if !errors.Is(err, ErrRefused) && !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(b) != n {
			t.Fatalf("read %d bytes, want %d", len(b), n)
		}
	})
}
