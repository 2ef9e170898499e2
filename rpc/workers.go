package rpc

import (
	"runtime"
	"sync"
)

// workers runs unary calls on long-lived goroutines, so that a call costs
// no goroutine start and runs on a stack already grown by the calls before
// it (gRPC-go's NumStreamWorkers, here on by default). They start as calls
// need them, up to max, and stay until the Server stops. A call that finds
// every worker busy runs on a goroutine of its own, as without workers:
// the reader that admits it never waits for a worker, and the call slots
// (MaxConcurrentCalls) bound the calls either way.
//
// The idle workers are a stack: the one that finished last runs the next
// call, while its stack is still in the cache, as the runtime reuses the
// goroutine that exited last for a new one.
type workers struct {
	mu      sync.Mutex
	idle    []*worker // waiting for a job, the last to finish on top
	max     int
	started int
	closed  bool
	wg      sync.WaitGroup
}

type worker struct {
	jobs chan job // capacity 1: run never waits
}

// job is a call to run: runStreams(st) on l; a nil l ends the worker.
type job struct {
	l  *serverLink
	st *callStream
}

// defaultStreamWorkers is the workers a Server keeps unless
// NumStreamWorkers says otherwise.
func defaultStreamWorkers() int { return max(16, 4*runtime.GOMAXPROCS(0)) }

func (w *workers) init(n int) { w.max = n }

// largeRequest is the request frame from which a call runs on a goroutine
// of its own even when a worker is idle. Measured on tcp:// loopback
// (BenchmarkPingPong, 64 KiB each way), a worker made the round trip
// 15-20 % slower than a fresh goroutine, the difference going into
// protobuf's copy of the payload into new memory, and gone with GOGC=off;
// at that size a goroutine's start is noise, while at 64 B the worker
// saves a wake-up per call.
const largeRequest = 16 << 10

// run runs l.runStreams(st) on an idle worker, a new one while fewer than
// max run, or else on a goroutine of its own. It never waits.
func (w *workers) run(l *serverLink, st *callStream) {
	if st.frame.Len() >= largeRequest {
		go l.runStreams(st)
		return
	}
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		wk := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		wk.jobs <- job{l, st}
		return
	}
	if !w.closed && w.started < w.max {
		w.started++
		w.wg.Add(1)
		w.mu.Unlock()
		go w.work(&worker{jobs: make(chan job, 1)}, job{l, st})
		return
	}
	w.mu.Unlock()
	go l.runStreams(st)
}

// work runs j, then the jobs handed to wk, until stop.
func (w *workers) work(wk *worker, j job) {
	defer w.wg.Done()
	for j.l != nil {
		j.l.runStreams(j.st)
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, wk)
		w.mu.Unlock()
		j = <-wk.jobs
	}
}

// stop ends the workers, once no connection can hand them calls any more
// (every serverLink has ended), and waits for them.
func (w *workers) stop() {
	w.mu.Lock()
	w.closed = true
	idle := w.idle
	w.idle = nil
	w.mu.Unlock()
	for _, wk := range idle {
		wk.jobs <- job{}
	}
	w.wg.Wait()
}
