package bench

import (
	"runtime"
	"runtime/metrics"
	"syscall"
	"time"
)

// procCosts is a snapshot of what this process has spent so far, beyond
// the heap (runtime.MemStats is read apart).
type procCosts struct {
	csw     int64         // voluntary and involuntary context switches
	cpu     time.Duration // user + system
	cgo     int64
	wakeups uint64 // estimated goroutine wake-ups
}

// schedTrackingPeriod: the runtime records the scheduling latency (time
// runnable before running) of one in this many goroutine transitions, so
// the /sched/latencies count times this estimates the wake-ups.
const schedTrackingPeriod = 8

func readProcCosts() procCosts {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var n uint64
	if s[0].Value.Kind() == metrics.KindFloat64Histogram {
		for _, c := range s[0].Value.Float64Histogram().Counts {
			n += c
		}
	}
	return procCosts{
		csw:     ru.Nvcsw + ru.Nivcsw,
		cpu:     time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		cgo:     runtime.NumCgoCall(),
		wakeups: n * schedTrackingPeriod,
	}
}

// setPerCall fills r's per-call process costs from two snapshots.
func (b procCosts) setPerCall(a procCosts, r *Result) {
	if r.Calls <= 0 {
		return
	}
	n := float64(r.Calls)
	r.CSWPerCall = float64(a.csw-b.csw) / n
	r.WakeupsPerCall = float64(a.wakeups-b.wakeups) / n
	r.CgoPerCall = float64(a.cgo-b.cgo) / n
	r.CPUPerCall = (a.cpu - b.cpu) / time.Duration(r.Calls)
}
