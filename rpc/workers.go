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
type workers struct {
	jobs chan job // unbuffered: a send succeeds only when a worker waits

	mu      sync.Mutex
	max     int
	started int
	closed  bool
	wg      sync.WaitGroup
}

// job is a call to run: runStreams(st) on l.
type job struct {
	l  *serverLink
	st *callStream
}

// defaultStreamWorkers is the workers a Server keeps unless
// NumStreamWorkers says otherwise.
func defaultStreamWorkers() int { return max(16, 4*runtime.GOMAXPROCS(0)) }

func (w *workers) init(n int) {
	w.jobs = make(chan job)
	w.max = n
}

// run runs l.runStreams(st) on a waiting worker, a new one while fewer than
// max run, or else on a goroutine of its own. It never waits.
func (w *workers) run(l *serverLink, st *callStream) {
	select {
	case w.jobs <- job{l, st}:
		return
	default:
	}
	w.mu.Lock()
	if !w.closed && w.started < w.max {
		w.started++
		w.wg.Add(1)
		w.mu.Unlock()
		go w.work(job{l, st})
		return
	}
	w.mu.Unlock()
	go l.runStreams(st)
}

// work runs j, then the jobs handed to it, until stop.
func (w *workers) work(j job) {
	defer w.wg.Done()
	for ok := true; ok; j, ok = <-w.jobs {
		j.l.runStreams(j.st)
	}
}

// stop ends the workers, once no connection can hand them calls any more
// (every serverLink has ended), and waits for them.
func (w *workers) stop() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.jobs)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
