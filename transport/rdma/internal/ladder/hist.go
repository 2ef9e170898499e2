package main

import "time"

// hist records latencies at 1 µs resolution up to its size (beyond: the
// last bucket) without allocating, so recording costs nothing per call.
type hist struct {
	n      int64
	counts []uint32
}

const histMax = 1 << 18 // µs: 262 ms

func newHist() *hist { return &hist{counts: make([]uint32, histMax)} }

func (h *hist) add(d time.Duration) {
	us := int(d / time.Microsecond)
	h.counts[min(max(us, 0), histMax-1)]++
	h.n++
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile is the nearest-rank q-quantile, in µs.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n) + 0.999999)
	var seen int64
	for i, c := range h.counts {
		if seen += int64(c); seen >= rank {
			return time.Duration(i) * time.Microsecond
		}
	}
	return histMax * time.Microsecond
}
