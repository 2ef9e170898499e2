package loadgen

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Config is one run. Exactly one of Calls and Duration ends it.
type Config struct {
	// Concurrency is the number of workers, each making one call at a time.
	Concurrency int
	// Calls is the number of calls to make in all; Duration, how long to
	// start calls for (calls in flight then are waited for and counted).
	Calls    int64
	Duration time.Duration
	// Rate caps the calls started per second over all workers; 0: none.
	Rate float64
	// Clock paces the calls (default SystemClock). Latencies are measured
	// with the system's monotonic clock whatever it is.
	Clock Clock
}

// Call makes one call; worker is the worker's number, in [0, Concurrency),
// which the caller may use to pick a connection.
type Call func(ctx context.Context, worker int) error

// Result is what a run measured.
type Result struct {
	Elapsed time.Duration // from the workers' start to the last call's end
	Latency Histogram     // every call's, failed ones too
	// Errors counts the calls that failed, by the key errKey gave them;
	// successful calls are not in it.
	Errors map[string]uint64
}

// Calls is the number of calls made.
func (r *Result) Calls() uint64 { return r.Latency.Count() }

// Rate is the calls completed per second.
func (r *Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls()) / r.Elapsed.Seconds()
}

// Run runs cfg, calling call from cfg.Concurrency goroutines, all of which
// have returned when Run does. errKey names an error's kind for the
// counts (a status code). done, when not nil, is incremented as calls end,
// for a progress bar. Run ends early, with ctx's error and what it measured
// so far, when ctx ends.
func Run(ctx context.Context, cfg Config, call Call, errKey func(error) string, done *atomic.Int64) (*Result, error) {
	if cfg.Concurrency <= 0 {
		return nil, errors.New("loadgen: concurrency must be at least 1")
	}
	if (cfg.Calls > 0) == (cfg.Duration > 0) {
		return nil, errors.New("loadgen: give a call count or a duration, not both")
	}
	if cfg.Rate < 0 {
		return nil, errors.New("loadgen: the rate must not be negative")
	}
	clock := cfg.Clock
	if clock == nil {
		clock = SystemClock{}
	}
	var pacer *Pacer
	if cfg.Rate > 0 {
		pacer = NewPacer(cfg.Rate, clock)
	}
	// stop ends the starting of calls, not the calls: those in flight
	// when the duration ends finish and count.
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Duration > 0 {
		t := time.AfterFunc(cfg.Duration, cancel)
		defer t.Stop()
	}
	// ended is checked before each call. It asks ctx itself, not only
	// stop: ctx's Err reports its end before stop hears of it (a
	// standard context's cancel stores the error and closes Done, then
	// cancels the contexts made from it one by one, and its goroutine can
	// be descheduled in between; a context with an AfterFunc method may
	// tell them later still). Meanwhile calls on ctx fail at once, and
	// workers that looked at stop alone started and counted them by the
	// hundred (TestRunEndsWithCtx).
	ended := func() bool { return ctx.Err() != nil || stop.Err() != nil }
	var left atomic.Int64
	left.Store(cfg.Calls)

	type partial struct {
		h    Histogram
		errs map[string]uint64
	}
	parts := make([]partial, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &parts[w]
			for !ended() {
				if cfg.Calls > 0 && left.Add(-1) < 0 {
					return
				}
				if pacer != nil && (pacer.Wait(stop) != nil || ended()) {
					return
				}
				t0 := time.Now()
				err := call(ctx, w)
				p.h.Record(time.Since(t0))
				if err != nil {
					if p.errs == nil {
						p.errs = make(map[string]uint64)
					}
					p.errs[errKey(err)]++
				}
				if done != nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	r := &Result{Elapsed: time.Since(start), Errors: make(map[string]uint64)}
	for i := range parts {
		r.Latency.Merge(&parts[i].h)
		for k, v := range parts[i].errs {
			r.Errors[k] += v
		}
	}
	return r, ctx.Err()
}
