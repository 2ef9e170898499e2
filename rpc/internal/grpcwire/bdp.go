package grpcwire

import "time"

// BDPPing is the payload of the PINGs a BDP estimator sends, told apart
// from keepalive PINGs by it.
var BDPPing = [8]byte{'r', 'r', 'p', 'c', 'b', 'd', 'p', 0}

// MaxBDPWindow bounds the windows a BDP estimator grows to: 16 MiB, as in
// gRPC-go.
const MaxBDPWindow = 16 << 20

// BDP estimates a connection's bandwidth-delay product from the data it
// receives, the way gRPC-go's transport does (its "BDP estimation", which
// follows TCP's receive-window autotuning): the first DATA after a
// measurement starts the next one with a PING; the bytes that arrive
// until its ack are a sample of what the path holds in one round trip.
// When a sample fills most of the current window (2/3) and the bandwidth
// it shows is the best seen, the window becomes twice the sample, up to
// the bound. A receiver then announces the new window (SETTINGS
// INITIAL_WINDOW_SIZE, and the connection's if it is smaller). Windows
// only grow: what a connection may hold stays within the bound.
//
// A BDP is not safe for concurrent use; its owner serializes it.
type BDP struct {
	window  uint32 // the window announced now
	max     uint32
	out     bool      // a PING is out
	sample  uint32    // bytes received since it was queued
	sentAt  time.Time // when it was queued
	rtt     float64   // smoothed round trip, seconds
	samples int
	bwMax   float64
}

// NewBDP starts an estimator at the window announced, growing up to max.
func NewBDP(window, max uint32) *BDP {
	return &BDP{window: window, max: max}
}

// Window is the window announced now.
func (b *BDP) Window() uint32 { return b.window }

// Received counts n bytes of DATA; ping reports that a BDP PING should be
// sent now (once per measurement, and never once the bound is reached).
func (b *BDP) Received(n int, now time.Time) (ping bool) {
	if b.window >= b.max {
		return false
	}
	if b.out {
		b.sample += uint32(min(n, 1<<30))
		return false
	}
	b.out, b.sample, b.sentAt = true, uint32(n), now
	return true
}

// Acked takes the ack of the BDP PING; grow is the new window when the
// estimate grew, 0 to keep the current one.
func (b *BDP) Acked(now time.Time) (grow uint32) {
	if !b.out {
		return 0
	}
	b.out = false
	d := now.Sub(b.sentAt).Seconds()
	if d <= 0 {
		d = 1e-9
	}
	b.samples++
	if b.samples < 10 {
		b.rtt += (d - b.rtt) / float64(b.samples)
	} else {
		b.rtt += (d - b.rtt) * 0.1
	}
	bw := float64(b.sample) / (b.rtt * 1.5)
	if bw > b.bwMax {
		b.bwMax = bw
	}
	if float64(b.sample) < float64(b.window)*2/3 || bw < b.bwMax {
		return 0
	}
	w := uint64(b.sample) * 2
	w = min(w, uint64(b.max))
	if w <= uint64(b.window) {
		return 0
	}
	b.window = uint32(w)
	return b.window
}
