package grpcwire

import (
	"fmt"
	"math"
	"time"
)

// maxTimeoutDigits is the most digits grpc-timeout's value may have.
const maxTimeoutDigits = 8

var timeoutUnits = []struct {
	unit byte
	d    time.Duration
}{
	{'n', time.Nanosecond}, {'u', time.Microsecond}, {'m', time.Millisecond},
	{'S', time.Second}, {'M', time.Minute}, {'H', time.Hour},
}

// EncodeTimeout writes d as a grpc-timeout value: at most 8 digits and the
// finest unit that holds it, rounded up so that the peer never sees less
// time than is left. d ≤ 0 is "1n": the deadline has passed, but the header
// still says there was one.
func EncodeTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range timeoutUnits {
		v := d / u.d
		if d%u.d != 0 {
			v++ // up: the peer never sees less time than is left
		}
		if v < 1e8 {
			return fmt.Sprintf("%d%c", int64(v), u.unit)
		}
	}
	return "99999999H" // unreachable for a Duration, kept for safety
}

// DecodeTimeout parses a grpc-timeout value. More than 8 digits, no digits,
// a sign or an unknown unit is malformed; a value too large for a Duration
// is the largest Duration (no deadline a peer can send overflows).
func DecodeTimeout(s string) (time.Duration, error) {
	if len(s) < 2 || len(s) > maxTimeoutDigits+1 {
		return 0, fmt.Errorf("%w: grpc-timeout %q: want 1 to 8 digits and a unit", ErrMalformed, clip(s))
	}
	unit := s[len(s)-1]
	var d time.Duration
	for _, u := range timeoutUnits {
		if u.unit == unit {
			d = u.d
		}
	}
	if d == 0 {
		return 0, fmt.Errorf("%w: grpc-timeout %q: unknown unit %q", ErrMalformed, clip(s), unit)
	}
	var v int64
	for _, c := range []byte(s[:len(s)-1]) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: grpc-timeout %q: not a number", ErrMalformed, clip(s))
		}
		v = v*10 + int64(c-'0') // at most 8 digits: no overflow
	}
	if v > math.MaxInt64/int64(d) {
		return math.MaxInt64, nil
	}
	return time.Duration(v) * d, nil
}

// clip shortens what an error message quotes from the peer.
func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
