package grpcwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// PrefixLen is the size of the prefix before every gRPC message: a
// compressed flag byte and a 4-byte big-endian length.
const PrefixLen = 5

// ErrMalformed is wrapped by every error about bytes that break the protocol.
var ErrMalformed = errors.New("grpc: malformed")

// ErrTooLarge is wrapped when a message's announced length exceeds the
// receiver's limit.
var ErrTooLarge = errors.New("grpc: message larger than the limit")

// AppendPrefix appends the prefix of a message of n bytes to b.
func AppendPrefix(b []byte, compressed bool, n int) []byte {
	flag := byte(0)
	if compressed {
		flag = 1
	}
	return binary.BigEndian.AppendUint32(append(b, flag), uint32(n))
}

// ParsePrefix reads a message's prefix. A flag other than 0 or 1 is
// malformed; a length over max (and over 2^31-1 whatever max is) wraps
// ErrTooLarge, before any memory is taken for it.
func ParsePrefix(p [PrefixLen]byte, max int) (compressed bool, n int, err error) {
	switch p[0] {
	case 0:
	case 1:
		compressed = true
	default:
		return false, 0, fmt.Errorf("%w: message flag %#x (want 0 or 1)", ErrMalformed, p[0])
	}
	l := binary.BigEndian.Uint32(p[1:])
	if l > 1<<31-1 || int64(l) > int64(max) {
		return compressed, 0, fmt.Errorf("%w: %d bytes announced, limit %d", ErrTooLarge, l, max)
	}
	return compressed, int(l), nil
}

// Reader reads length-prefixed messages from a stream's DATA, one at a time.
// It holds at most one message: memory is the limit, not what the peer
// announces.
type Reader struct {
	r   io.Reader
	max int
}

// NewReader reads messages of at most max bytes from r.
func NewReader(r io.Reader, max int) *Reader { return &Reader{r: r, max: max} }

// Next returns the next message, read into buf when it is large enough (the
// result may alias buf). At the end of the stream between messages it
// returns io.EOF; a stream that ends inside a message is malformed
// (io.ErrUnexpectedEOF is wrapped too).
func (r *Reader) Next(buf []byte) (msg []byte, compressed bool, err error) {
	var p [PrefixLen]byte
	if _, err := io.ReadFull(r.r, p[:]); err != nil {
		if err == io.EOF {
			return nil, false, io.EOF
		}
		if err == io.ErrUnexpectedEOF {
			return nil, false, fmt.Errorf("%w: stream ended inside a message prefix: %w", ErrMalformed, err)
		}
		return nil, false, err
	}
	compressed, n, err := ParsePrefix(p, r.max)
	if err != nil {
		return nil, compressed, err
	}
	if cap(buf) >= n {
		msg = buf[:n]
		if _, err := io.ReadFull(r.r, msg); err != nil {
			return nil, compressed, ended(n, err)
		}
		return msg, compressed, nil
	}
	// Grow with what arrives: a peer announcing a large message and sending
	// little costs what it sent, not what it announced.
	msg = buf[:0]
	for len(msg) < n {
		step := min(n-len(msg), max(growStep, len(msg)))
		msg = slices.Grow(msg, step)[:len(msg)+step] // one allocation a step, no zeroed copy to append
		if _, err := io.ReadFull(r.r, msg[len(msg)-step:]); err != nil {
			return nil, compressed, ended(n, err)
		}
	}
	return msg, compressed, nil
}

// growStep is the first step a message larger than the caller's buffer grows
// by; later steps double what has arrived.
const growStep = 32 << 10

func ended(n int, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: stream ended inside a message of %d bytes: %w", ErrMalformed, n, io.ErrUnexpectedEOF)
	}
	return err
}

// AppendPart appends p, the next bytes of a message being assembled in
// msg, whose whole size (what msg will hold in the end) is total. The
// capacity grows by doubling, never past total: a message is not
// allocated from its announced length before its bytes come (the caller
// starts msg small), and a large one does not end in a buffer of twice
// its size, as append's growth would leave it.
func AppendPart(msg, p []byte, total int) []byte {
	if need := len(msg) + len(p); need > cap(msg) {
		grown := make([]byte, len(msg), min(max(2*cap(msg), need), max(total, need)))
		copy(grown, msg)
		msg = grown
	}
	return append(msg, p...)
}
