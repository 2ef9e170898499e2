package loadgen

import (
	"math"
	"math/bits"
	"time"
)

// subBits is the number of mantissa bits a bucket keeps: 2^subBits buckets
// per power of two, so a bucket is at most 1/2^subBits (under 1%) wide
// relative to its values.
const subBits = 7

const subCount = 1 << subBits

// Histogram counts durations in log-linear buckets: exact below 2^subBits
// ns, then 2^subBits buckets per power of two. Its size is fixed (about
// 64 × 128 counters, allocated on first use), whatever it counts.
type Histogram struct {
	counts   []uint64
	n        uint64
	sum      float64
	min, max time.Duration
}

func bucketOf(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - subBits // >= 1
	return e<<subBits + int(v>>(e-1)&(subCount-1))
}

// bucketBounds returns the smallest and largest duration of bucket i.
func bucketBounds(i int) (lo, hi time.Duration) {
	if i < subCount {
		return time.Duration(i), time.Duration(i)
	}
	e, m := i>>subBits, uint64(i&(subCount-1))
	lo64 := (subCount | m) << (e - 1)
	return time.Duration(lo64), time.Duration(lo64 + 1<<(e-1) - 1)
}

// Record counts one duration (a negative one as 0).
func (h *Histogram) Record(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]uint64, (64-subBits+1)<<subBits)
	}
	d = max(d, 0)
	h.counts[bucketOf(d)]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += float64(d)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, len(o.counts))
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min, Max and Mean are exact.
func (h *Histogram) Min() time.Duration { return h.min }
func (h *Histogram) Max() time.Duration { return h.max }
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(math.Round(h.sum / float64(h.n)))
}

// Quantile returns the duration at or below which a fraction q of the
// durations lie (nearest rank), to within a bucket's width: the middle of
// the bucket holding that rank, clamped to the exact min and max.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketBounds(i)
			return min(max(lo+(hi-lo)/2, h.min), h.max)
		}
	}
	return h.max
}

// Bar is one bar of a coarser view of the histogram: the count of
// durations in [Lo, Hi).
type Bar struct {
	Lo, Hi time.Duration
	Count  uint64
}

// Bars returns the durations between Min and Max in n bars of equal width
// on a log scale (a linear one when Max < 2 × Min), as ghz's text
// histogram shows them.
func (h *Histogram) Bars(n int) []Bar {
	if h.n == 0 || n <= 0 {
		return nil
	}
	lo, hi := float64(max(h.min, 1)), float64(h.max)+1
	edge := func(i int) time.Duration {
		if hi < 2*lo {
			return time.Duration(lo + (hi-lo)*float64(i)/float64(n))
		}
		return time.Duration(math.Round(lo * math.Pow(hi/lo, float64(i)/float64(n))))
	}
	bars := make([]Bar, n)
	for i := range bars {
		bars[i] = Bar{Lo: edge(i), Hi: edge(i + 1)}
	}
	bars[0].Lo = h.min
	bars[n-1].Hi = h.max + 1
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		blo, bhi := bucketBounds(i)
		mid := blo + (bhi-blo)/2
		mid = min(max(mid, h.min), h.max)
		j := 0
		for j < n-1 && mid >= bars[j].Hi {
			j++
		}
		bars[j].Count += c
	}
	return bars
}
