package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsCoverAndOrder(t *testing.T) {
	prev := -1
	for _, ns := range []uint64{0, 1, 255, 256, 257, 511, 512, 1000, 1 << 20, 1<<40 + 12345, 1<<62 - 1} {
		b := bucket(ns)
		if b < prev {
			t.Fatalf("bucket(%d) = %d, before %d: buckets must not go down", ns, b, prev)
		}
		if b >= len(hist{}.counts) {
			t.Fatalf("bucket(%d) = %d, out of range", ns, b)
		}
		v := uint64(bucketValue(b))
		if diff := float64(v) - float64(ns); diff > float64(ns)/100+1 || -diff > float64(ns)/100+1 {
			t.Fatalf("bucketValue(bucket(%d)) = %d: more than 1%% off", ns, v)
		}
		prev = b
	}
}

func TestQuantiles(t *testing.T) {
	var h hist
	r := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	for range 100000 {
		d := time.Duration(r.ExpFloat64() * float64(100*time.Microsecond))
		all = append(all, d)
		h.record(d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.99, 0.999} {
		want := all[int(q*float64(len(all)))-1]
		got := h.quantile(q)
		if rel := float64(got-want) / float64(want); rel > 0.01 || rel < -0.01 {
			t.Errorf("quantile(%v) = %v, exact %v", q, got, want)
		}
	}
	if h.quantile(1) != all[len(all)-1] {
		t.Errorf("quantile(1) = %v, want the max %v", h.quantile(1), all[len(all)-1])
	}
	var empty hist
	if empty.quantile(0.5) != 0 || empty.mean() != 0 {
		t.Error("an empty histogram should report zeros")
	}
	var m hist
	m.merge(&h)
	m.merge(&h)
	if m.n != 2*h.n || m.quantile(0.5) != h.quantile(0.5) {
		t.Errorf("merging a histogram with itself: n %d, p50 %v; want %d, %v", m.n, m.quantile(0.5), 2*h.n, h.quantile(0.5))
	}
}
