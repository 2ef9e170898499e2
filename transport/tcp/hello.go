package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmarpc/rdmarpc/transport"
)

// The hello each side sends first, 16 bytes:
//
//	0  magic   "RRPT"
//	4  version uint16, big-endian (1)
//	6  flags   uint16, zero (reserved)
//	8  max     uint32: the largest message this side accepts
//	12 zero    uint32 (reserved)
const (
	helloLen       = 16
	helloMagic     = "RRPT"
	version        = 1
	minMaxMessage  = 1 << 10 // a peer announcing less is not worth talking to
	frameHeaderLen = 4
)

type hello struct {
	version uint16
	max     uint32
}

func (h hello) encode() [helloLen]byte {
	var b [helloLen]byte
	copy(b[:4], helloMagic)
	binary.BigEndian.PutUint16(b[4:], h.version)
	binary.BigEndian.PutUint32(b[8:], h.max)
	return b
}

// decodeHello validates a peer's hello. Its errors wrap transport.ErrProtocol
// and say what was wrong, for the log line that reports the refusal.
func decodeHello(b []byte) (hello, error) {
	if len(b) != helloLen {
		return hello{}, fmt.Errorf("%w: tcp hello is %d bytes, want %d", transport.ErrProtocol, len(b), helloLen)
	}
	if string(b[:4]) != helloMagic {
		return hello{}, fmt.Errorf("%w: not an rdmarpc tcp peer (hello starts %q, want %q)", transport.ErrProtocol, b[:4], helloMagic)
	}
	h := hello{version: binary.BigEndian.Uint16(b[4:]), max: binary.BigEndian.Uint32(b[8:])}
	if h.version != version {
		return hello{}, fmt.Errorf("%w: peer speaks tcp transport version %d, this side speaks %d", transport.ErrProtocol, h.version, version)
	}
	if flags := binary.BigEndian.Uint16(b[6:]); flags != 0 {
		return hello{}, fmt.Errorf("%w: unknown hello flags %#x", transport.ErrProtocol, flags)
	}
	if h.max < minMaxMessage {
		return hello{}, fmt.Errorf("%w: peer accepts messages of at most %d bytes, below the minimum %d", transport.ErrProtocol, h.max, minMaxMessage)
	}
	return h, nil
}
