package main

import (
	"sync/atomic"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
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

// lats are the round trips a loop recorded while measuring, in a slice
// sized for a cell ahead (growing it costs the run an allocation now and
// then, not one a call).
type lats []time.Duration

func newLats() *lats {
	l := make(lats, 0, 1<<16)
	return &l
}

func (l *lats) add(d time.Duration) { *l = append(*l, d) }

// runner starts a rung's loops for c and returns a function that waits for
// them to end (after c reaches stopping) with the latencies of the calls
// started while measuring.
type runner func(c *cell) (wait func() (lats, error), err error)

// measure runs one cell: warm-up, then the measured phase between bench's
// two readings of the process's costs. The rung is the result's Impl;
// transport is "rdma" or "tcp".
func measure(rung, transport string, size, conc int, warmup, d time.Duration, run runner) (bench.Result, error) {
	c := &cell{size: size, conc: conc}
	wait, err := run(c)
	if err != nil {
		return bench.Result{}, err
	}
	time.Sleep(warmup)
	m := bench.StartMeasure()
	start := time.Now()
	c.state.Store(measuring)
	time.Sleep(d)
	c.state.Store(stopping)
	elapsed := time.Since(start)
	l, err := wait()
	r := bench.Result{Impl: rung, Transport: transport, Size: size, Concurrency: conc, Elapsed: elapsed}
	m.Stop(&r, int64(len(l)))
	if err != nil {
		return bench.Result{}, err
	}
	r.P50, r.P99, r.P999 = bench.Percentiles(l)
	return r, nil
}

// merge joins the latencies of a cell's loops.
func merge(ls []*lats) lats {
	var out lats
	for _, l := range ls {
		out = append(out, *l...)
	}
	return out
}
