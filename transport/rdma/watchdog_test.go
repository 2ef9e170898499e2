package rdma

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sync"
	"time"
)

// stallWatchdog watches a transport's counters while a test runs; when no
// send is posted and no completion arrives for quiet, it writes the state
// of every live connection and all goroutines' stacks to stderr, once per
// stall, so that a stall that keepalive ends leaves its cause behind. It
// asserts nothing. stop ends it.
func stallWatchdog(tr *Transport, quiet time.Duration) (stop func()) {
	var mu sync.Mutex
	var conns []*conn
	tr.connHook = func(c *conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	progress := func() uint64 {
		return tr.counters.sendsPosted.Load() + tr.counters.recvCompletions.Load() + tr.counters.sendCompletions.Load()
	}
	go watchStalls(tr, quiet, progress, &mu, &conns, done, exited)
	return func() {
		close(done)
		<-exited
	}
}

// watchStalls is the watchdog's goroutine (named, for goleak to ignore).
func watchStalls(tr *Transport, quiet time.Duration, progress func() uint64, mu *sync.Mutex, connsp *[]*conn, done <-chan struct{}, exited chan<- struct{}) {
	defer close(exited)
	tick := time.NewTicker(quiet / 10)
	defer tick.Stop()
	last, since, dumped := progress(), time.Now(), false
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if p := progress(); p != last {
			last, since, dumped = p, time.Now(), false
			continue
		}
		if dumped || time.Since(since) < quiet {
			continue
		}
		dumped = true
		fmt.Fprintf(os.Stderr, "=== STALL: nothing moved for %v; counters %v\n", quiet, tr.Counters())
		mu.Lock()
		live := (*connsp)[:0]
		for _, c := range *connsp {
			if !c.torndown.Load() {
				live = append(live, c)
			}
		}
		*connsp = live
		for _, c := range live {
			c.dumpState(os.Stderr)
		}
		mu.Unlock()
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		fmt.Fprintln(os.Stderr, "=== END STALL")
	}
}

// dumpState writes the send, receive and completion state of c.
func (c *conn) dumpState(w io.Writer) {
	q := c.cqs.queue()
	pmuFree := q.pmu.TryLock()
	if pmuFree {
		q.pmu.Unlock()
	}
	q.pl.Lock()
	armed := q.armed
	q.pl.Unlock()
	c.mu.Lock()
	signaled := 0
	for _, p := range c.ring {
		if p.signaled {
			signaled++
		}
	}
	avail, arenaFree := -1, -1
	if c.win != nil {
		avail = c.win.Avail()
	}
	if c.mem != nil {
		c.mem.mu.Lock()
		arenaFree = len(c.mem.free)
		c.mem.mu.Unlock()
	}
	fmt.Fprintf(w, "conn %v closing=%v: credits=%d free=%d arenaFree=%d lent=%d unsignaled=%d ring=%d(signaled %d) outbox=%d posting=%v sqFree=%d ctlWanted=%v waiters=%d turnHeld=%d turnWaiters=%d abortOwed=%v | pmuFree=%v armed=%v recvOutstanding=%d asmBusy=%v",
		c.boot.RemoteAddr(), c.closing.Load(), avail, c.avail, arenaFree, c.lent, c.unsignaled, len(c.ring), signaled, len(c.outbox), c.posting, c.sqFree, c.ctlWanted, len(c.wake.waiters), len(c.turn), c.turnWaiters.Load(), c.abortOwed,
		pmuFree, armed, c.recvOutstanding.Load(), c.asm.buf != nil)
	c.mu.Unlock()
	c.rmu.Lock()
	fmt.Fprintf(w, " | owed=%d unreturned=%d queue=%d queued=%d deferred=%d unposted=%d rwaiters=%d rdone=%v\n",
		c.led.Owed(), c.led.Unreturned(), len(c.queue), c.queued, len(c.deferred), len(c.unposted), len(c.rwake.waiters), c.rdone)
	c.rmu.Unlock()
}
