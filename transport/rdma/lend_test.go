package rdma

import (
	"errors"
	"testing"

	"github.com/rdmarpc/rdmarpc/transport"
)

func TestImmLend(t *testing.T) {
	for _, k := range []kind{kindMessage, kindFirst, kindMiddle, kindLast, kindCredit, kindAbort, kindGiveBack, kindAsk, kindAnswer} {
		imm := encodeImmLend(k, 65535, 4095)
		got, c, l, err := decodeImmLend(imm, true)
		if err != nil || got != k || c != 65535 || l != 4095 {
			t.Errorf("%v: decoded %v, %d, %d, %v", k, got, c, l, err)
		}
		// A peer that never negotiated lends may not use the field.
		if _, _, _, err := decodeImmLend(imm, false); !errors.Is(err, transport.ErrProtocol) {
			t.Errorf("%v with a lend, not negotiated: %v", k, err)
		}
	}
	// Kinds 7..9 are the rendezvous', 10 and 11 the ask and the answer
	// (TestRndvKinds); 12 is the first undefined one.
	if _, _, _, err := decodeImmLend(12<<28, true); !errors.Is(err, transport.ErrProtocol) {
		t.Errorf("kind 12: %v", err)
	}
	if k, c, l, err := decodeImmLend(encodeImm(kindMessage, 3), false); err != nil || k != kindMessage || c != 3 || l != 0 {
		t.Errorf("plain message without lends: %v %d %d %v", k, c, l, err)
	}
}

// FuzzImmLend: any 32 bits of immediate data decode to a defined kind and
// fields within their widths, or a protocol error; never a panic.
func FuzzImmLend(f *testing.F) {
	for _, imm := range []uint32{0, encodeImmLend(kindCredit, 8, 8), encodeImmLend(kindGiveBack, 1, 15), 0xFFFFFFFF, 6 << 28} {
		f.Add(imm, true)
		f.Add(imm, false)
	}
	f.Fuzz(func(t *testing.T, imm uint32, lends bool) {
		k, c, l, err := decodeImmLend(imm, lends)
		if err != nil {
			if !errors.Is(err, transport.ErrProtocol) {
				t.Fatalf("%#x: error %v is not a protocol error", imm, err)
			}
			return
		}
		if k > kindAnswer || !lends && (k == kindGiveBack || l != 0) || c > 0xFFFF || l > 0xFFF {
			t.Fatalf("%#x (lends %v): kind %v, credits %d, field %d", imm, lends, k, c, l)
		}
		_ = k.String()
		if encodeImmLend(k, c, l) != imm {
			t.Fatalf("%#x does not round-trip: %#x", imm, encodeImmLend(k, c, l))
		}
	})
}
