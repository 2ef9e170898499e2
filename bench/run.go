package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
)

// Config is one cell of a benchmark matrix.
type Config struct {
	Impl        string        // what is measured, for reports: "rdmarpc", "grpc"
	Transport   string        // "tcp", "rdma"
	Size        int           // payload bytes per request (and response)
	Concurrency int           // callers sharing the one connection; 0 means 1
	Duration    time.Duration // how long to measure; 0 means 1 s
	Warmup      time.Duration // how long to call before measuring; 0 means Duration/5
	// Server, when set, measures the server's end of the measured phase
	// in its own process (Result.Server).
	Server Meter
}

// Result is what Run measured.
type Result struct {
	Impl, Transport   string
	Size, Concurrency int
	Calls             int64 // measured calls
	WarmupCalls       int64 // calls before measuring (not in the CSV)
	Elapsed           time.Duration
	P50, P99, P999    time.Duration
	AllocsPerCall     float64 // mallocs in this process per call
	BytesPerCall      float64 // bytes allocated in this process per call
	// Per call, in this process (both ends when the server runs in it):
	// context switches, goroutine wake-ups (estimated from the runtime's
	// sampled scheduling latencies), cgo calls, CPU time.
	CSWPerCall, WakeupsPerCall, CgoPerCall float64
	CPUPerCall                             time.Duration
	VCSWPerCall                            float64 // voluntary context switches only
	InstrPerCall                           float64 // instructions, under callgrind (0 otherwise)
	// Server is the server's end, measured in its own process (zero when
	// it ran in this one, or was not measured: then this process's
	// figures count both ends).
	Server EndCosts
	// MBPerSecOverride and CallsPerSecOverride, when set, replace the
	// figures derived from Calls and Elapsed: raw-verbs rows carry the
	// throughput perftest reported.
	MBPerSecOverride, CallsPerSecOverride float64
}

// CallsPerSec is the throughput in calls per second.
func (r Result) CallsPerSec() float64 {
	if r.CallsPerSecOverride != 0 {
		return r.CallsPerSecOverride
	}
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls) / r.Elapsed.Seconds()
}

// MBPerSec is the payload throughput, counted once per call, in 10^6 B/s.
func (r Result) MBPerSec() float64 {
	if r.MBPerSecOverride != 0 {
		return r.MBPerSecOverride
	}
	return r.CallsPerSec() * float64(r.Size) / 1e6
}

// Run drives c with cfg.Concurrency callers, each making one call after
// another, first for cfg.Warmup (not recorded), then for cfg.Duration,
// recording every call's latency. Allocations are read from runtime.MemStats
// around the measured phase. The first failed call ends the run with its
// error.
func Run(ctx context.Context, c Client, cfg Config) (Result, error) {
	callers := make([]caller, max(cfg.Concurrency, 1))
	for i := range callers {
		callers[i] = func(req *echopb.SayRequest) (*echopb.SayResponse, error) { return c.Say(context.Background(), req) }
	}
	return run(ctx, callers, cfg)
}

// caller makes one round trip; each of a cell's callers is used by one
// goroutine.
type caller func(*echopb.SayRequest) (*echopb.SayResponse, error)

func (cfg Config) withDefaults() Config {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Duration <= 0 {
		cfg.Duration = time.Second
	}
	if cfg.Warmup <= 0 {
		cfg.Warmup = cfg.Duration / 5
	}
	return cfg
}

// measure holds what the process had spent when a measured phase began.
type measure struct {
	mem    runtime.MemStats
	costs  procCosts
	server Meter // nil, or began
	err    error // the server's Begin's
}

func startMeasure(server Meter) *measure {
	runtime.GC()
	m := &measure{server: server}
	if server != nil {
		m.err = server.Begin()
	}
	runtime.ReadMemStats(&m.mem)
	m.costs = readProcCosts()
	return m
}

// stop puts what calls cost since start into r; the error is the server
// meter's.
func (m *measure) stop(r *Result, calls int64) error {
	costs := readProcCosts()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if calls > 0 {
		r.AllocsPerCall = float64(after.Mallocs-m.mem.Mallocs) / float64(calls)
		r.BytesPerCall = float64(after.TotalAlloc-m.mem.TotalAlloc) / float64(calls)
	}
	r.Calls = calls
	m.costs.setPerCall(costs, r)
	if m.server == nil || m.err != nil {
		return m.err
	}
	var err error
	r.Server, err = m.server.End(calls)
	return err
}

// run is Run with one caller per concurrent goroutine.
func run(ctx context.Context, callers []caller, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	r := Result{Impl: cfg.Impl, Transport: cfg.Transport, Size: cfg.Size, Concurrency: cfg.Concurrency}
	payload := make([]byte, cfg.Size)
	for i := range payload {
		payload[i] = byte(i)
	}

	// The warm-up also sizes the latency buffers, so that recording does not
	// allocate during the measured phase.
	warm, _, err := drive(ctx, callers, payload, cfg.Warmup, nil)
	if err != nil {
		return r, err
	}
	perWorker := int(float64(warm)*cfg.Duration.Seconds()/cfg.Warmup.Seconds()*1.5)/cfg.Concurrency + 1024
	lats := make([][]time.Duration, cfg.Concurrency)
	for i := range lats {
		lats[i] = make([]time.Duration, 0, perWorker)
	}

	m := startMeasure(cfg.Server)
	calls, elapsed, err := drive(ctx, callers, payload, cfg.Duration, lats)
	if merr := m.stop(&r, calls); err == nil {
		err = merr
	}
	if err != nil {
		return r, err
	}
	r.WarmupCalls, r.Elapsed = warm, elapsed
	all := make([]time.Duration, 0, calls)
	for _, l := range lats {
		all = append(all, l...)
	}
	r.P50, r.P99, r.P999 = Percentiles(all)
	return r, nil
}

// drive runs callers, one goroutine each, for d and returns how many
// calls completed and the wall time from start until the last caller
// stopped. When lats is not nil, caller i appends each call's latency to
// lats[i].
func drive(ctx context.Context, callers []caller, payload []byte, d time.Duration, lats [][]time.Duration) (int64, time.Duration, error) {
	conc := len(callers)
	var (
		wg     sync.WaitGroup
		counts = make([]int64, conc)
		errs   = make([]error, conc)
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range conc {
		wg.Go(func() {
			req := &echopb.SayRequest{Payload: payload}
			for {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				if err := ctx.Err(); err != nil {
					errs[w] = err
					return
				}
				resp, err := callers[w](req)
				lat := time.Since(t0)
				if err == nil && len(resp.GetPayload()) != len(payload) {
					err = fmt.Errorf("bench: echo returned %d payload bytes, sent %d", len(resp.GetPayload()), len(payload))
				}
				if err != nil {
					errs[w] = err
					return
				}
				counts[w]++
				if lats != nil {
					lats[w] = append(lats[w], lat)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var n int64
	for _, k := range counts {
		n += k
	}
	for _, err := range errs {
		if err != nil {
			return n, elapsed, err
		}
	}
	return n, elapsed, nil
}

// Percentiles sorts lats in place and returns its 50th, 99th and 99.9th
// percentiles (nearest rank). An empty slice gives zeros.
func Percentiles(lats []time.Duration) (p50, p99, p999 time.Duration) {
	if len(lats) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lats)
	return Quantile(lats, 0.50), Quantile(lats, 0.99), Quantile(lats, 0.999)
}

// Quantile returns the q-quantile (0 < q ≤ 1) of sorted by nearest rank: the
// smallest value that at least a fraction q of the values do not exceed.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// ceil(q·n) − 1, with a tolerance so that 0.99·100 (99.00000000000001
	// in floating point) is rank 99, not 100.
	rank := int(math.Ceil(q*float64(len(sorted))-1e-9)) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// Measure is what the process had spent when a measured phase began, for
// a harness of its own (bench/cmd/ladder): Stop puts what the calls since
// cost into a Result, as Run does.
type Measure struct{ m *measure }

// StartMeasure collects the garbage, then takes the process's costs so far.
func StartMeasure() *Measure { return &Measure{startMeasure(nil)} }

// Stop puts what calls cost since StartMeasure into r (and sets r.Calls).
func (m *Measure) Stop(r *Result, calls int64) {
	_ = m.m.stop(r, calls) // no server meter: no error
}
