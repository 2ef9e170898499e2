package main

import (
	"runtime"
	"runtime/metrics"
	"syscall"
	"time"
)

// costs is a snapshot of what this process has spent so far.
type costs struct {
	csw   int64         // voluntary and involuntary context switches
	cpu   time.Duration // user + system
	cgo   int64
	mallc uint64
	sched uint64 // runnable→running transitions the runtime sampled
}

var schedSample = []metrics.Sample{{Name: "/sched/latencies:seconds"}}

// schedTrackingPeriod: the runtime records the scheduling latency of one in
// this many goroutine transitions (runtime.gTrackingPeriod), so the
// histogram's count times this estimates the wake-ups.
const schedTrackingPeriod = 8

func snapshot() costs {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	metrics.Read(schedSample)
	var sched uint64
	if schedSample[0].Value.Kind() == metrics.KindFloat64Histogram {
		for _, n := range schedSample[0].Value.Float64Histogram().Counts {
			sched += n
		}
	}
	return costs{
		csw:   ru.Nvcsw + ru.Nivcsw,
		cpu:   time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		cgo:   runtime.NumCgoCall(),
		mallc: ms.Mallocs,
		sched: sched * schedTrackingPeriod,
	}
}

// perCall is what each call cost between two snapshots.
type perCall struct {
	CSW, Wakeups, Cgo, Mallocs float64
	CPU                        time.Duration
}

func (b costs) per(a costs, calls int64) perCall {
	if calls <= 0 {
		return perCall{}
	}
	n := float64(calls)
	return perCall{
		CSW:     float64(a.csw-b.csw) / n,
		Wakeups: float64(a.sched-b.sched) / n,
		Cgo:     float64(a.cgo-b.cgo) / n,
		Mallocs: float64(a.mallc-b.mallc) / n,
		CPU:     (a.cpu - b.cpu) / time.Duration(calls),
	}
}
