package rawecho

import (
	"encoding/binary"
	"fmt"
	"io"
)

// MaxFrame is the largest payload a frame may carry; a longer length is an
// error, so that a hostile length cannot size a buffer.
const MaxFrame = 16 << 20

const headerLen = 4

// readFrame reads one frame from r into buf (grown when too small, never
// beyond headerLen+MaxFrame) and returns buf holding the header and the
// payload.
func readFrame(r io.Reader, buf []byte) ([]byte, error) {
	if cap(buf) < headerLen {
		buf = make([]byte, headerLen, 512)
	}
	buf = buf[:headerLen]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, err
	}
	n := binary.BigEndian.Uint32(buf)
	if n > MaxFrame {
		return buf, fmt.Errorf("rawecho: frame of %d bytes, more than %d", n, MaxFrame)
	}
	total := headerLen + int(n)
	if cap(buf) < total {
		nb := make([]byte, total)
		copy(nb, buf)
		buf = nb
	}
	buf = buf[:total]
	if _, err := io.ReadFull(r, buf[headerLen:]); err != nil {
		return buf, noEOF(err)
	}
	return buf, nil
}

// noEOF: a frame cut short is an unexpected EOF, not a clean end.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// putHeader writes the length of payload into the first headerLen bytes of
// frame, which holds the header and then the payload.
func putHeader(frame []byte) {
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-headerLen))
}
