package main

import (
	"sync/atomic"
	"time"
)

// Phases of a cell, set by measure and read by the rung's loops.
const (
	warming = iota
	measuring
	stopping
)

// cell is one rung at one size and concurrency, as it runs.
type cell struct {
	size, conc int
	state      atomic.Int32
}

func (c *cell) phase() int32 { return c.state.Load() }

// result is one measured cell.
type result struct {
	Rung       string
	Size, Conc int
	Calls      int64
	Elapsed    time.Duration
	P50, P99   time.Duration
	Cost       perCall
}

func (r result) callsPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls) / r.Elapsed.Seconds()
}

// runner starts a rung's loops for c and returns a function that waits for
// them to end (after c reaches stopping) with the latencies of the calls
// started while measuring.
type runner func(c *cell) (wait func() (*hist, error), err error)

// measure runs one cell: warm-up, then the measured phase between two cost
// snapshots.
func measure(name string, size, conc int, warmup, d time.Duration, run runner) (result, error) {
	c := &cell{size: size, conc: conc}
	wait, err := run(c)
	if err != nil {
		return result{}, err
	}
	time.Sleep(warmup)
	before := snapshot()
	start := time.Now()
	c.state.Store(measuring)
	time.Sleep(d)
	c.state.Store(stopping)
	elapsed := time.Since(start)
	h, err := wait()
	after := snapshot()
	if err != nil {
		return result{}, err
	}
	return result{
		Rung: name, Size: size, Conc: conc, Calls: h.n, Elapsed: elapsed,
		P50: h.quantile(0.5), P99: h.quantile(0.99), Cost: before.per(after, h.n),
	}, nil
}
