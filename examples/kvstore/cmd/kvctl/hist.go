package main

import (
	"math/bits"
	"time"
)

// hist is a latency histogram with log-linear buckets: exact below 256 ns,
// then 128 buckets per power of two, so a quantile is off by under 1%. It
// takes about 64 KiB and never grows; one per goroutine, merged at the end.
type hist struct {
	counts [64 << subBits]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

const subBits = 7

func bucket(ns uint64) int {
	if ns < 2<<subBits {
		return int(ns)
	}
	shift := bits.Len64(ns) - subBits - 1
	return (shift+1)<<subBits + int(ns>>shift) - 1<<subBits
}

// bucketValue is the middle of bucket i's range.
func bucketValue(i int) time.Duration {
	if i < 2<<subBits {
		return time.Duration(i)
	}
	shift := i>>subBits - 1
	lo := uint64(i&(1<<subBits-1)+1<<subBits) << shift
	return time.Duration(lo + (uint64(1)<<shift)/2)
}

func (h *hist) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucket(uint64(d))]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the latency below which a fraction q of the samples
// fall (0 with no samples).
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return min(bucketValue(i), h.max)
		}
	}
	return h.max
}

func (h *hist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}
