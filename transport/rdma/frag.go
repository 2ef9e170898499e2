package rdma

import (
	"encoding/binary"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
)

// Every Send carries 32 bits of immediate data:
//
//	bits 31..28  kind
//	bits 27..16  zero (reserved)
//	bits 15..0   credits returned to the receiver (piggybacked)
//
// A message that fits one receive buffer travels whole (kindMessage) with
// no header, so the receiver can hand it up in place. A larger one is cut
// into fragments of exactly one buffer each, except the last: the first
// starts with the message's total length (4 bytes, big-endian). A sender
// whose context ends between fragments sends an abort (empty, one credit)
// before its next message, and the receiver drops the partial message.
type kind uint8

const (
	kindMessage kind = 0 // a whole message
	kindFirst   kind = 1 // the first fragment of a larger message
	kindMiddle  kind = 2
	kindLast    kind = 3
	kindCredit  kind = 4 // credit-only: no payload, takes no credit
	kindAbort   kind = 5 // the fragmented message in progress is abandoned
)

const firstHeaderLen = 4

func (k kind) String() string {
	return [...]string{"message", "first fragment", "middle fragment", "last fragment", "credit-only", "abort", "give-back",
		"rendezvous descriptor", "rendezvous done", "rendezvous refused", "ask", "answer"}[k]
}

func encodeImm(k kind, credits int) uint32 { return uint32(k)<<28 | uint32(credits) }

func decodeImm(imm uint32) (kind, int, error) {
	k := kind(imm >> 28)
	if k > kindAnswer || k == kindGiveBack {
		return 0, 0, protoErr("unknown message kind %d in immediate data %#x", k, imm)
	}
	if imm&0x0FFF0000 != 0 {
		return 0, 0, protoErr("reserved bits set in immediate data %#x", imm)
	}
	return k, int(imm & 0xFFFF), nil
}

// reassembler rebuilds a fragmented message from its fragments, which an RC
// queue pair delivers in order. It never trusts the peer: lengths and the
// order of kinds are checked.
type reassembler struct {
	max  int    // the largest message we accept
	buf  []byte // the message being rebuilt, nil when none
	have int
}

// fragment takes one fragment's payload and returns the whole message when
// it was the last. The returned slice comes from bufpool.
func (r *reassembler) fragment(k kind, p []byte) ([]byte, error) {
	switch k {
	case kindFirst:
		if r.buf != nil {
			return nil, protoErr("a first fragment inside a fragmented message")
		}
		if len(p) < firstHeaderLen {
			return nil, protoErr("first fragment of %d bytes, shorter than its header", len(p))
		}
		total := int(binary.BigEndian.Uint32(p))
		data := p[firstHeaderLen:]
		if total > r.max {
			return nil, protoErr("fragmented message of %d bytes, over the %d-byte limit", total, r.max)
		}
		if total <= len(data) {
			return nil, protoErr("first fragment holds %d of a %d-byte message: not fragmented", len(data), total)
		}
		r.buf = bufpool.Get(total)
		r.have = copy(r.buf, data)
		return nil, nil
	case kindMiddle, kindLast:
		if r.buf == nil {
			return nil, protoErr("a %v outside a fragmented message", k)
		}
		if len(p) == 0 || r.have+len(p) > len(r.buf) {
			return nil, protoErr("%v of %d bytes with %d of %d already received", k, len(p), r.have, len(r.buf))
		}
		r.have += copy(r.buf[r.have:], p)
		if k == kindMiddle {
			if r.have == len(r.buf) {
				return nil, protoErr("middle fragment completes the message")
			}
			return nil, nil
		}
		if r.have != len(r.buf) {
			return nil, protoErr("last fragment leaves %d of %d bytes missing", len(r.buf)-r.have, len(r.buf))
		}
		msg := r.buf
		r.buf, r.have = nil, 0
		return msg, nil
	}
	if r.buf != nil {
		return nil, protoErr("a whole message inside a fragmented one")
	}
	return nil, nil
}

// abort abandons the message being rebuilt: its sender gave up on it.
func (r *reassembler) abort() error {
	if r.buf == nil {
		return protoErr("an abort outside a fragmented message")
	}
	r.reset()
	return nil
}

// wholeAllowed reports an error when a whole message arrives in the middle
// of a fragmented one.
func (r *reassembler) wholeAllowed() error {
	if r.buf != nil {
		return protoErr("a whole message inside a fragmented one")
	}
	return nil
}

// reset drops a message being rebuilt.
func (r *reassembler) reset() {
	if r.buf != nil {
		bufpool.Put(r.buf)
		r.buf, r.have = nil, 0
	}
}

// fragments returns how many Sends a message of n bytes takes with receive
// buffers of size b.
func fragments(n, b int) int {
	if n <= b {
		return 1
	}
	rest := n - (b - firstHeaderLen)
	return 1 + (rest+b-1)/b
}
