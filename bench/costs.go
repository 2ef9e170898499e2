package bench

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"syscall"
	"time"

	"github.com/rdmarpc/rdmarpc/bench/internal/callgrind"
)

// procCosts is a snapshot of what this process has spent so far, beyond
// the heap (runtime.MemStats is read apart).
type procCosts struct {
	csw     int64         // voluntary and involuntary context switches
	vcsw    int64         // voluntary ones only: a thread went to sleep
	cpu     time.Duration // user + system
	cgo     int64
	wakeups uint64 // estimated goroutine wake-ups
	instr   uint64 // instructions, under callgrind (0 otherwise)
}

// instrTotal is the instructions counted so far under callgrind: each
// callgrind.Take returns those since the one before.
var (
	instrMu    sync.Mutex
	instrTotal uint64
)

// instructions is what this process has executed so far, as far as
// callgrind counted (0 outside callgrind). The count's own cost (a dump
// and its file read, about 80k instructions) falls in the interval after
// it: a few instructions per call over a measured cell.
func instructions() uint64 {
	instrMu.Lock()
	defer instrMu.Unlock()
	n, err := callgrind.Take()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
	}
	instrTotal += n
	return instrTotal
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
		vcsw:    ru.Nvcsw,
		cpu:     time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		cgo:     runtime.NumCgoCall(),
		wakeups: n * schedTrackingPeriod,
		instr:   instructions(),
	}
}

// setPerCall fills r's per-call process costs from two snapshots.
func (b procCosts) setPerCall(a procCosts, r *Result) {
	if r.Calls <= 0 {
		return
	}
	n := float64(r.Calls)
	r.CSWPerCall = float64(a.csw-b.csw) / n
	r.VCSWPerCall = float64(a.vcsw-b.vcsw) / n
	r.WakeupsPerCall = float64(a.wakeups-b.wakeups) / n
	r.CgoPerCall = float64(a.cgo-b.cgo) / n
	r.CPUPerCall = (a.cpu - b.cpu) / time.Duration(r.Calls)
	r.InstrPerCall = float64(a.instr-b.instr) / n
}

// EndCosts is what one end of a cell spent per measured call, read in its
// own process: the server's, when it runs in a process of its own.
type EndCosts struct {
	CPU    time.Duration // user + system
	VCSW   float64       // voluntary context switches (the process's threads slept)
	Allocs float64       // heap allocations
	Instr  float64       // instructions, under callgrind (0 otherwise)
	// Cgo calls and goroutine wake-ups (estimated as Result's are): what
	// the ladder's RPC rungs need from a server in a process of its own.
	Cgo, Wakeups float64
}

// Meter measures the other end of a cell (a server in another process)
// over the cell's measured phase: Begin as it starts, End with the calls
// made once it is over.
type Meter interface {
	Begin() error
	End(calls int64) (EndCosts, error)
}

// Snapshot is what this process has spent so far, for a Meter's other end:
// the difference of two, divided by the calls between them, is its
// EndCosts.
type Snapshot struct {
	CPU     time.Duration
	VCSW    int64
	Mallocs uint64
	Instr   uint64
	Cgo     int64
	Wakeups uint64
}

// TakeSnapshot reads what this process has spent so far (getrusage
// RUSAGE_SELF, runtime.MemStats, the cgo calls and the scheduler's
// sampled latencies).
func TakeSnapshot() Snapshot {
	p := readProcCosts()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return Snapshot{CPU: p.cpu, VCSW: p.vcsw, Mallocs: m.Mallocs, Instr: p.instr, Cgo: p.cgo, Wakeups: p.wakeups}
}

// PerCall is what was spent from s to later, per call.
func (s Snapshot) PerCall(later Snapshot, calls int64) EndCosts {
	if calls <= 0 {
		return EndCosts{}
	}
	n := float64(calls)
	return EndCosts{
		CPU:     (later.CPU - s.CPU) / time.Duration(calls),
		VCSW:    float64(later.VCSW-s.VCSW) / n,
		Allocs:  float64(later.Mallocs-s.Mallocs) / n,
		Instr:   float64(later.Instr-s.Instr) / n,
		Cgo:     float64(later.Cgo-s.Cgo) / n,
		Wakeups: float64(later.Wakeups-s.Wakeups) / n,
	}
}
