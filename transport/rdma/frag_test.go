package rdma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rdmarpc/rdmarpc/transport"
)

// cut splits msg into the Sends a sender with peer buffers of b bytes makes.
func cut(msg []byte, b int) (kinds []kind, parts [][]byte) {
	if len(msg) <= b {
		return []kind{kindMessage}, [][]byte{msg}
	}
	first := binary.BigEndian.AppendUint32(nil, uint32(len(msg)))
	first = append(first, msg[:b-firstHeaderLen]...)
	kinds, parts = append(kinds, kindFirst), append(parts, first)
	for rest := msg[b-firstHeaderLen:]; len(rest) > 0; {
		n := min(b, len(rest))
		k := kindMiddle
		if n == len(rest) {
			k = kindLast
		}
		kinds, parts = append(kinds, k), append(parts, rest[:n])
		rest = rest[n:]
	}
	return kinds, parts
}

func TestFragmentRoundTrip(t *testing.T) {
	for _, b := range []int{256, 4096} {
		for _, n := range []int{0, 1, b - 1, b, b + 1, 2*b - 4, 2*b - 3, 10*b + 7} {
			msg := bytes.Repeat([]byte{byte(n)}, n)
			for i := range msg {
				msg[i] = byte(i * 7)
			}
			kinds, parts := cut(msg, b)
			if len(kinds) != fragments(n, b) {
				t.Fatalf("b=%d n=%d: %d parts, fragments() says %d", b, n, len(kinds), fragments(n, b))
			}
			r := reassembler{max: 1 << 20}
			var got []byte
			for i, k := range kinds {
				if len(parts[i]) > b {
					t.Fatalf("part %d of %d bytes exceeds the buffer", i, len(parts[i]))
				}
				if k == kindMessage {
					got = parts[i]
					continue
				}
				m, err := r.fragment(k, parts[i])
				if err != nil {
					t.Fatalf("b=%d n=%d part %d: %v", b, n, i, err)
				}
				if m != nil {
					got = m
				}
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("b=%d n=%d: reassembled %d bytes, differ", b, n, len(got))
			}
		}
	}
}

func TestAbort(t *testing.T) {
	r := reassembler{max: 1 << 20}
	if err := r.abort(); !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("abort with nothing in progress: %v", err)
	}
	kinds, parts := cut(make([]byte, 1000), 256)
	for i := range 2 {
		if _, err := r.fragment(kinds[i], parts[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.abort(); err != nil {
		t.Fatal(err)
	}
	// After the abort a new message starts cleanly.
	msg := []byte("next")
	if err := r.wholeAllowed(); err != nil {
		t.Fatalf("whole message after an abort: %v", err)
	}
	_ = msg
}

func TestImm(t *testing.T) {
	for _, k := range []kind{kindMessage, kindFirst, kindMiddle, kindLast, kindCredit, kindAbort} {
		got, c, err := decodeImm(encodeImm(k, 65535))
		if err != nil || got != k || c != 65535 {
			t.Fatalf("%v: %v %d %v", k, got, c, err)
		}
	}
	if _, _, err := decodeImm(6 << 28); !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("kind 6: %v", err)
	}
	if _, _, err := decodeImm(1 << 20); !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("reserved bits: %v", err)
	}
}

// FuzzReassembly feeds arbitrary fragment sequences to the reassembler:
// input bytes are read as (kind, length, payload) records. It must never
// panic, allocate beyond its limit, or return a message whose length is not
// what the first fragment announced.
func FuzzReassembly(f *testing.F) {
	seq := func(kinds []kind, parts [][]byte) []byte {
		var b []byte
		for i, k := range kinds {
			b = append(b, byte(k), byte(len(parts[i])>>8), byte(len(parts[i])))
			b = append(b, parts[i]...)
		}
		return b
	}
	f.Add(seq(cut(bytes.Repeat([]byte("x"), 1000), 256)))
	f.Add(seq(cut([]byte("small"), 256)))
	f.Add(seq([]kind{kindMiddle}, [][]byte{{1}}))
	f.Add(seq([]kind{kindFirst, kindFirst}, [][]byte{{0, 0, 1, 0, 9}, {0, 0, 1, 0, 9}}))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := reassembler{max: 4096}
		defer r.reset()
		for len(in) >= 3 {
			k := kind(in[0] % 6)
			n := min(int(in[1])<<8|int(in[2]), len(in)-3)
			p := in[3 : 3+n]
			in = in[3+n:]
			var announced int
			if k == kindFirst && len(p) >= 4 {
				announced = int(binary.BigEndian.Uint32(p))
			}
			var msg []byte
			var err error
			if k == kindAbort {
				err = r.abort()
			} else {
				msg, err = r.fragment(k, p)
			}
			if err != nil {
				if !errors.Is(err, transport.ErrProtocol) {
					t.Fatalf("error %v does not wrap ErrProtocol", err)
				}
				return // the connection would close here
			}
			if announced > 4096 {
				t.Fatalf("accepted a %d-byte message over the limit", announced)
			}
			if len(msg) > 4096 {
				t.Fatalf("message of %d bytes over the limit", len(msg))
			}
		}
	})
}
