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
// (MaxConcurrentCalls) bound the calls either way. When a worker is idle,
// the reader runs the call itself and the worker takes over the reading
// (admission.runInline): a reading worker counts as a reader, not as one
// of the max, until it hands the reading on in turn. A call alone on its
// connection skips that hand-off when the transport reports arrivals
// (unreadTurn): the reading then goes to a worker only if a frame comes.
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
	handed  uint64 // readings handed to an idle worker (read), for tests
	wg      sync.WaitGroup
}

type worker struct {
	jobs chan job // capacity 1: run never waits
}

// job is a call to run: l.adm.run(st); without st, the reading of
// l (readTurn), handed on by the goroutine that read a unary call and runs
// it; a nil l ends the worker.
type job struct {
	l  *serverLink
	st *callStream
}

// defaultStreamWorkers is the workers a Server keeps unless
// NumStreamWorkers says otherwise.
func defaultStreamWorkers() int { return max(16, 4*runtime.GOMAXPROCS(0)) }

func (w *workers) init(n int) { w.max = n }

// run runs l.adm.run(st) on an idle worker, a new one while fewer than
// max run, or else on a goroutine of its own. It never waits.
func (w *workers) run(l *serverLink, st *callStream) {
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
	go l.adm.run(st)
}

// work runs j, then the jobs handed to wk, until stop.
func (w *workers) work(wk *worker, j job) {
	defer w.wg.Done()
	for j.l != nil {
		reading := j.st == nil
		if reading {
			j.l.readTurn()
		} else {
			j.l.adm.run(j.st)
		}
		if !w.park(wk, reading) {
			return
		}
		j = <-wk.jobs
	}
}

// park makes wk idle again, unless the workers stopped or, for a worker
// that was reading (not one of the started ones meanwhile), max are
// started already; it reports false when wk's goroutine is to end.
func (w *workers) park(wk *worker, reading bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || reading && w.started >= w.max {
		return false
	}
	if reading {
		w.started++
	}
	w.idle = append(w.idle, wk)
	return true
}

// read hands the reading of l to an idle worker, which then counts as a
// reader, not as one of the started workers; it reports false, handing
// nothing, when no worker is idle. The caller must have stopped reading:
// the worker starts at once.
func (w *workers) read(l *serverLink) bool {
	w.mu.Lock()
	n := len(w.idle)
	if n == 0 {
		w.mu.Unlock()
		return false
	}
	wk := w.idle[n-1]
	w.idle[n-1] = nil
	w.idle = w.idle[:n-1]
	w.started--
	w.handed++
	w.mu.Unlock()
	wk.jobs <- job{l: l}
	return true
}

// adopt makes the calling goroutine, a connection's first reader that
// handed the reading on and ran the call it read, one of the workers
// while fewer than max are started (its stack is grown); otherwise it
// returns at once, and the goroutine ends.
func (w *workers) adopt() {
	w.mu.Lock()
	if w.closed || w.started >= w.max {
		w.mu.Unlock()
		return
	}
	w.started++
	w.wg.Add(1)
	wk := &worker{jobs: make(chan job, 1)}
	w.idle = append(w.idle, wk)
	w.mu.Unlock()
	w.work(wk, <-wk.jobs)
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
