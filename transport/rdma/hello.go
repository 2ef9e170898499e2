package rdma

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmarpc/rdmarpc/transport"
)

// The bootstrap handshake runs over the TCP connection that then stays open
// as the liveness signal. The client sends its hello; the server answers
// with its own hello or a refusal; the client, once its queue pair can
// receive, sends one ready byte (or a refusal). docs/rdma.md has the layout.
const (
	helloLen     = 64
	helloMagic   = "RRPR"
	refuseMagic  = "RRPN"
	readyByte    = 0x01
	version      = 1
	maxReasonLen = 1024

	minBufferSize = 256
	maxBufferSize = 16 << 20
	maxRecvs      = 1<<16 - 1 // credits travel in 16 bits
	minMaxMessage = 1 << 10
	maxMaxMessage = 1 << 30
)

// hello is what each side tells the other about its queue pair.
type hello struct {
	features   uint32 // featLend, featRoute, featRndv, featAnswer; the two sides use what both set
	qpn        uint32
	psn        uint32
	gid        [16]byte
	lid        uint16
	mtu        uint16 // bytes
	bufSize    uint32 // each receive buffer
	recvs      uint32 // data receives posted: the credits the peer starts with
	maxMessage uint32
	guaranteed uint32 // with featLend: the part of recvs never given back (0: all of it)
	endpoint   uint8  // with featRoute (client): the server's endpoint it picked
}

func (h hello) encode() []byte {
	b := make([]byte, helloLen)
	copy(b, helloMagic)
	binary.BigEndian.PutUint16(b[4:], version)
	binary.BigEndian.PutUint32(b[8:], h.features)
	binary.BigEndian.PutUint32(b[12:], h.qpn)
	binary.BigEndian.PutUint32(b[16:], h.psn)
	copy(b[20:36], h.gid[:])
	binary.BigEndian.PutUint16(b[36:], h.lid)
	binary.BigEndian.PutUint16(b[38:], h.mtu)
	binary.BigEndian.PutUint32(b[40:], h.bufSize)
	binary.BigEndian.PutUint32(b[44:], h.recvs)
	binary.BigEndian.PutUint32(b[48:], h.maxMessage)
	binary.BigEndian.PutUint32(b[52:], h.guaranteed)
	b[56] = h.endpoint
	return b
}

func protoErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", transport.ErrProtocol, fmt.Sprintf(format, a...))
}

// decodeHello validates a peer's hello strictly; the error says what was
// wrong, for the refusal sent back and the log line.
func decodeHello(b []byte) (hello, error) {
	if len(b) != helloLen {
		return hello{}, protoErr("rdma hello is %d bytes, want %d", len(b), helloLen)
	}
	if string(b[:4]) != helloMagic {
		return hello{}, protoErr("not an rdmarpc rdma peer (hello starts %q, want %q)", b[:4], helloMagic)
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != version {
		return hello{}, protoErr("peer speaks rdma transport version %d, this side speaks %d", v, version)
	}
	h := hello{
		features:   binary.BigEndian.Uint32(b[8:]),
		qpn:        binary.BigEndian.Uint32(b[12:]),
		psn:        binary.BigEndian.Uint32(b[16:]),
		lid:        binary.BigEndian.Uint16(b[36:]),
		mtu:        binary.BigEndian.Uint16(b[38:]),
		bufSize:    binary.BigEndian.Uint32(b[40:]),
		recvs:      binary.BigEndian.Uint32(b[44:]),
		maxMessage: binary.BigEndian.Uint32(b[48:]),
	}
	if h.features&featLend != 0 {
		h.guaranteed = binary.BigEndian.Uint32(b[52:])
	}
	if h.features&featRoute != 0 {
		h.endpoint = b[56]
	}
	copy(h.gid[:], b[20:36])
	switch {
	case h.qpn == 0 || h.qpn > 0xFFFFFF:
		return hello{}, protoErr("queue pair number %#x out of range", h.qpn)
	case h.psn > 0xFFFFFF:
		return hello{}, protoErr("packet sequence number %#x out of range", h.psn)
	case h.mtu != 256 && h.mtu != 512 && h.mtu != 1024 && h.mtu != 2048 && h.mtu != 4096:
		return hello{}, protoErr("path MTU %d is not 256, 512, 1024, 2048 or 4096", h.mtu)
	case h.bufSize < minBufferSize || h.bufSize > maxBufferSize:
		return hello{}, protoErr("receive buffers of %d bytes (allowed %d..%d)", h.bufSize, minBufferSize, maxBufferSize)
	case h.recvs == 0 || h.recvs > maxRecvs:
		return hello{}, protoErr("%d receive buffers (allowed 1..%d)", h.recvs, maxRecvs)
	case h.guaranteed > h.recvs:
		return hello{}, protoErr("a guaranteed window of %d credits beyond the %d receives", h.guaranteed, h.recvs)
	case h.maxMessage < minMaxMessage || h.maxMessage > maxMaxMessage:
		return hello{}, protoErr("maximum message of %d bytes (allowed %d..%d)", h.maxMessage, minMaxMessage, maxMaxMessage)
	}
	return h, nil
}

// encodeRefusal is what a side sends instead of a hello or the ready byte
// when it refuses the connection: the magic, a length, the reason.
func encodeRefusal(reason string) []byte {
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	b := make([]byte, 6, 6+len(reason))
	copy(b, refuseMagic)
	binary.BigEndian.PutUint16(b[4:], uint16(len(reason)))
	return append(b, reason...)
}

// keep is the window a sender keeps when it gives lent credits back: the
// peer's guaranteed window, or all its receives.
func (h hello) keep() int {
	if h.guaranteed > 0 {
		return int(h.guaranteed)
	}
	return int(h.recvs)
}
