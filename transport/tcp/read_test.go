package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// valueCtx is a context whose Done delivers one value per signal instead of
// being closed (as the RPC client asks its reader's Recv to step aside):
// Err reports Canceled while signalled. A Recv on it waits on the queue.
type valueCtx struct {
	context.Context
	done      chan struct{}
	signalled atomic.Bool
}

func newValueCtx() *valueCtx {
	return &valueCtx{Context: context.Background(), done: make(chan struct{}, 1)}
}

func (c *valueCtx) Done() <-chan struct{} { return c.done }
func (c *valueCtx) Err() error {
	if c.signalled.Load() {
		return context.Canceled
	}
	return nil
}
func (c *valueCtx) signal() { c.signalled.Store(true); c.done <- struct{}{} }
func (c *valueCtx) reset() {
	c.signalled.Store(false)
	select {
	case <-c.done:
	default:
	}
}

// waitHeld waits until c's read role is held by h and at least n bytes have
// arrived: the holder then holds what arrived of the frame. Progress, not
// time, decides.
func waitHeld(t *testing.T, c *conn, h holder, n uint64) {
	t.Helper()
	for {
		c.rmu.Lock()
		held := c.holder == h
		c.rmu.Unlock()
		if held && c.BytesReceived() >= n {
			return
		}
		select {
		case <-c.Done():
			t.Fatalf("connection closed: %v", c.closeErr())
		case <-time.After(time.Millisecond):
		}
	}
}

// waitIdleLoop waits until the reader goroutine holds the role and waits
// in read() for a frame's first byte: a Recv then takes the role from it.
func waitIdleLoop(t *testing.T, c *conn) {
	t.Helper()
	for {
		c.rmu.Lock()
		idle := c.holder == heldByLoop && c.idleRead
		c.rmu.Unlock()
		if idle {
			return
		}
		select {
		case <-c.Done():
			t.Fatalf("connection closed: %v", c.closeErr())
		case <-time.After(time.Millisecond):
		}
	}
}

// recvAsync runs Recv(ctx) on its own goroutine; the test waits for it.
func recvAsync(c *conn, ctx context.Context) <-chan error {
	got := make(chan error, 1)
	go func() {
		b, err := c.Recv(ctx)
		if err == nil {
			b.Release()
			err = errors.New("got a frame")
		}
		got <- err
	}()
	return got
}

// A Recv that gives up while a frame is half read (by itself, reading the
// socket; or waiting on the queue while the reader goroutine reads) leaves
// what arrived for the next holder, which returns the whole frame.
func TestRecvGivesUpMidFrame(t *testing.T) {
	nc, srv := acceptRaw(t, New(Options{}))
	if !srv.direct {
		t.Fatal("a loopback TCP connection does not read directly")
	}
	body := make([]byte, 3000)
	for i := range body {
		body[i] = byte(i * 7)
	}
	wire := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	wire = append(wire, body...)
	wire = append(wire, frames([]byte("next"))...)
	write := func(b []byte) {
		t.Helper()
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}

	// A Recv reading for itself (it took the role from the reader
	// goroutine) is cancelled with the frame half in.
	waitIdleLoop(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	gave := recvAsync(srv, ctx)
	waitHeld(t, srv, heldByRecv, helloLen)
	write(wire[:1000])
	waitHeld(t, srv, heldByRecv, helloLen+1000)
	cancel()
	if err := <-gave; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Recv mid-frame = %v, want context.Canceled", err)
	}

	// A Recv on a value-delivering ctx waits on the queue: the reader
	// goroutine takes the role and reads on; the signal ends the Recv.
	vc := newValueCtx()
	gave = recvAsync(srv, vc)
	write(wire[1000:2000])
	waitHeld(t, srv, heldByLoop, helloLen+2000)
	vc.signal()
	if err := <-gave; !errors.Is(err, context.Canceled) {
		t.Fatalf("signalled Recv mid-frame = %v, want context.Canceled", err)
	}

	// The next Recv gets the whole frame, then the next.
	write(wire[2000:])
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, want := range [][]byte{body, []byte("next")} {
		b, err := srv.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), want) {
			t.Fatalf("got %d bytes, not the %d-byte frame sent", b.Len(), len(want))
		}
		b.Release()
	}
}

// With nobody in Recv, the socket is still read: after a Recv read for
// itself and let go, frames the peer sends are read into the queue (every
// byte counted, OnArrival's callback called), and come out whole, in order.
func TestReaderReadsWithNobodyInRecv(t *testing.T) {
	nc, srv := acceptRaw(t, New(Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := nc.Write(frames([]byte("first"))); err != nil {
		t.Fatal(err)
	}
	b, err := srv.Recv(ctx) // reads for itself, then lets go
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	arrived := make(chan struct{})
	if !srv.OnArrival(func() { close(arrived) }) {
		t.Fatal("OnArrival with nothing queued reported false")
	}
	var wire []byte
	for i := range 50 {
		wire = append(wire, frames(bytes.Repeat([]byte{byte(i)}, 1000+i))...)
	}
	if _, err := nc.Write(wire); err != nil {
		t.Fatal(err)
	}
	<-arrived // a hang here is the failure: nobody read
	waitReceived(t, srv, helloLen+frameHeaderLen+5+uint64(len(wire)))
	for len(srv.recvq) < 50 { // the reader goroutine parses what it read
		select {
		case <-srv.Done():
			t.Fatalf("connection closed: %v", srv.closeErr())
		case <-time.After(time.Millisecond):
		}
	}
	for i := range 50 {
		b, err := srv.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b.Len() != 1000+i || b.Bytes()[0] != byte(i) {
			t.Fatalf("frame %d: %d bytes of %d", i, b.Len(), b.Bytes()[0])
		}
		b.Release()
	}
	// The peer's end, with nobody in Recv, closes the connection.
	if !srv.OnArrival(func() {}) {
		t.Fatal("OnArrival on an empty open connection reported false")
	}
	nc.Close()
	<-srv.Done()
}

// The idle timer's look at the role (idleFiredLocked): a role released
// since the last look gets another idleRead, free or held again, so a busy
// connection's releases arm nothing; a free role nobody took is the reader
// goroutine's; a role held since the last look lets the timer stop.
func TestIdleTimerLook(t *testing.T) {
	for _, tc := range []struct {
		name          string
		holder        holder
		released      bool // a release since the timer was armed
		armed, wanted bool
	}{
		{"free, released again", heldByNone, true, true, false},
		{"held again after a release", heldByRecv, true, true, false},
		{"free since the last look", heldByNone, false, false, true},
		{"held since the last look", heldByRecv, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &conn{idle: time.NewTimer(time.Hour), holder: tc.holder, releases: 7, idleSeen: 7, idleArmed: true}
			defer c.idle.Stop()
			if tc.released {
				c.releases++
			}
			c.idleFiredLocked()
			if c.idleArmed != tc.armed || c.loopWanted != tc.wanted {
				t.Fatalf("armed %v, reader goroutine wanted %v; want %v, %v", c.idleArmed, c.loopWanted, tc.armed, tc.wanted)
			}
			if c.idleArmed && c.idleSeen != c.releases {
				t.Fatalf("armed at %d releases, after %d", c.idleSeen, c.releases)
			}
		})
	}
}

// After a run of Recvs that each read for themselves and let go (the idle
// timer then goes on from its own fires), a role left free is still taken
// by the reader goroutine: a frame sent once nobody is in Recv is read
// (OnArrival's callback is called).
func TestReaderTakesTheRoleAfterABusyRun(t *testing.T) {
	nc, srv := acceptRaw(t, New(Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 500 {
		if _, err := nc.Write(frames([]byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
		b, err := srv.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b.Len() != 1 || b.Bytes()[0] != byte(i) {
			t.Fatalf("frame %d: %v", i, b.Bytes())
		}
		b.Release()
	}
	arrived := make(chan struct{})
	if !srv.OnArrival(func() { close(arrived) }) {
		t.Fatal("OnArrival with nothing queued reported false")
	}
	if _, err := nc.Write(frames([]byte("after"))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-ctx.Done(): // a hang guard, not a deadline: nobody read
		t.Fatal("a frame sent with nobody in Recv was never read")
	}
	nc.Close()
	<-srv.Done()
}

// Many goroutines racing Recv, with contexts that end (closed, a value on
// Done) while frames arrive in pieces: every frame comes out once, whole,
// and each goroutine gets frames in the order they were sent.
func TestRecvRacesWithCancels(t *testing.T) {
	nc, srv := acceptRaw(t, New(Options{}))
	const n, receivers = 2000, 6
	var wire []byte
	for i := range n {
		m := make([]byte, 8+i%3*12000) // some over directMax
		binary.BigEndian.PutUint64(m, uint64(i))
		for j := 8; j < len(m); j++ {
			m[j] = byte(i + j)
		}
		wire = append(wire, frames(m)...)
	}
	wrote := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		rest := wire
		for len(rest) > 0 {
			k := min(len(rest), 1+rng.IntN(9000))
			if _, err := nc.Write(rest[:k]); err != nil {
				wrote <- err
				return
			}
			rest = rest[k:]
		}
		wrote <- nil
	}()
	var (
		mu     sync.Mutex
		seen   = make([]int, n)
		total  int
		wg     sync.WaitGroup
		gaveUp atomic.Int64
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for r := range receivers {
		wg.Go(func() {
			last := -1
			vc := newValueCtx()
			for i := 0; ; i++ {
				var rctx context.Context = ctx
				var ended chan struct{}
				switch (r + i) % 4 {
				case 1: // closed Done, at some point
					c, cc := context.WithCancel(ctx)
					rctx, ended = c, make(chan struct{})
					go func() {
						defer close(ended)
						for range i % 5 {
							runtime.Gosched()
						}
						cc()
					}()
				case 2: // a value on Done, at some point
					rctx, ended = vc, make(chan struct{})
					go func() {
						defer close(ended)
						for range i % 5 {
							runtime.Gosched()
						}
						vc.signal()
					}()
				case 3: // a Done that never ends
					rctx = context.Background()
				}
				b, err := srv.Recv(rctx)
				if ended != nil {
					<-ended
					vc.reset()
				}
				if err != nil {
					mu.Lock()
					finished := total == n
					mu.Unlock()
					if finished {
						return // the others' frames are all in: the peer is gone
					}
					if errors.Is(err, context.Canceled) {
						gaveUp.Add(1)
						continue
					}
					t.Errorf("Recv: %v", err)
					return
				}
				m := b.Bytes()
				seq := int(binary.BigEndian.Uint64(m))
				ok := seq < n && len(m) == 8+seq%3*12000
				for j := 8; ok && j < len(m); j++ {
					ok = m[j] == byte(seq+j)
				}
				b.Release()
				if !ok {
					t.Errorf("frame %d torn: %d bytes", seq, len(m))
					return
				}
				if seq <= last {
					t.Errorf("a receiver got frame %d after %d", seq, last)
					return
				}
				last = seq
				mu.Lock()
				seen[seq]++
				total++
				if total == n {
					nc.Close() // the others' Recvs end
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("frame %d delivered %d times", i, k)
		}
	}
	t.Logf("%d Recvs gave up", gaveUp.Load())
}

// Close while a Recv reads for itself, blocked in read() in the middle of
// a frame: the Recv returns an error wrapping ErrClosed.
func TestCloseInterruptsDirectRecv(t *testing.T) {
	nc, srv := acceptRaw(t, New(Options{CloseGrace: 50 * time.Millisecond}))
	waitIdleLoop(t, srv)
	gave := recvAsync(srv, context.Background())
	waitHeld(t, srv, heldByRecv, helloLen)
	if _, err := nc.Write([]byte{0, 0}); err != nil { // half a header
		t.Fatal(err)
	}
	waitHeld(t, srv, heldByRecv, helloLen+2)
	srv.Close() // the peer stays, silent: Close's grace bounds the drain
	if err := <-gave; !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Recv across Close = %v, want an error wrapping ErrClosed", err)
	}
}

// customCtx has a Done of its own, which context.AfterFunc could only
// watch with a goroutine.
type customCtx struct{ context.Context }

func (customCtx) Done() <-chan struct{} { return make(chan struct{}) }

// watchable: contexts whose end AfterFunc watches without a goroutine, and
// WithValue layers over them; not a context with a Done of its own.
func TestWatchable(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	defer cancel()
	timed, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	type key struct{}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"Background", context.Background(), true},
		{"WithCancel", cancelled, true},
		{"WithTimeout", timed, true},
		{"WithValue over WithValue over WithTimeout", context.WithValue(context.WithValue(timed, key{}, 1), key{}, 2), true},
		{"WithValue over Background", context.WithValue(context.Background(), key{}, 1), true},
		{"a value on Done", newValueCtx(), false},
		{"WithValue over a Done of its own", context.WithValue(customCtx{context.Background()}, key{}, 1), false},
	} {
		if got := watchable(tc.ctx); got != tc.want {
			t.Errorf("watchable(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A Recv on a WithValue context (metadata) reads for itself, and its
// parent's cancel ends it.
func TestRecvOnValueContextReadsDirectly(t *testing.T) {
	_, srv := acceptRaw(t, New(Options{}))
	waitIdleLoop(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	type key struct{}
	gave := recvAsync(srv, context.WithValue(ctx, key{}, "md"))
	waitHeld(t, srv, heldByRecv, helloLen)
	cancel()
	if err := <-gave; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Recv = %v, want context.Canceled", err)
	}
}

// A large frame with nothing behind it (one call in flight) leaves the role
// to the next Recv, as a small one does; one with the next frame already
// coming (here the first bytes of its header) has the reader goroutine read
// that ahead.
func TestLargeFrameReadAheadOnlyWhenMoreComes(t *testing.T) {
	const size = directMax + 3000
	frame := func(n int, fill byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(n)), bytes.Repeat([]byte{fill}, n)...)
	}
	next := frame(8, 2)
	for _, tc := range []struct {
		name   string
		behind []byte // sent with the large frame, in the same write
	}{
		{"alone", nil},
		{"another behind it", next[:2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, srv := acceptRaw(t, New(Options{}))
			waitIdleLoop(t, srv)
			type got struct {
				b   transport.Buffer
				err error
			}
			first := make(chan got, 1)
			go func() {
				b, err := srv.Recv(context.Background())
				first <- got{b, err}
			}()
			waitHeld(t, srv, heldByRecv, helloLen) // the Recv reads for itself
			if _, err := nc.Write(append(frame(size, 1), tc.behind...)); err != nil {
				t.Fatal(err)
			}
			g := <-first
			if g.err != nil {
				t.Fatal(g.err)
			}
			if !bytes.Equal(g.b.Bytes(), bytes.Repeat([]byte{1}, size)) {
				t.Fatalf("large frame torn: %d bytes", g.b.Len())
			}
			g.b.Release()
			// Nothing but the end of a frame sets it, and the one behind
			// cannot end before the rest of it is sent.
			if ahead, want := srv.large.Load(), tc.behind != nil; ahead != want {
				t.Fatalf("after a large frame %s, read ahead = %v, want %v", tc.name, ahead, want)
			}
			if tc.behind == nil {
				return
			}
			if _, err := nc.Write(next[len(tc.behind):]); err != nil {
				t.Fatal(err)
			}
			b, err := srv.Recv(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer b.Release()
			if !bytes.Equal(b.Bytes(), next[frameHeaderLen:]) {
				t.Fatalf("frame behind the large one = %q", b.Bytes())
			}
		})
	}
}

// The stall bound costs no timer per frame: frames whose reads stop in the
// middle (the rest comes in a later write) arm the socket's deadline about
// once per quarter of the stall timeout, not once per frame, since every
// armed timer can wake a thread to re-poll.
func TestStallDeadlineIsNotArmedPerFrame(t *testing.T) {
	const stall = 2 * time.Second
	nc, srv := acceptRaw(t, New(Options{StallTimeout: stall}))
	const frames, size = 100, 1 << 10
	recvd := make(chan error, 1)
	go func() {
		for i := range frames {
			b, err := srv.Recv(context.Background())
			if err != nil {
				recvd <- err
				return
			}
			ok := b.Len() == size && b.Bytes()[size-1] == byte(i)
			b.Release()
			if !ok {
				recvd <- errors.New("frame torn")
				return
			}
		}
		recvd <- nil
	}()
	start := time.Now()
	sent := uint64(helloLen)
	for i := range frames {
		f := append(binary.BigEndian.AppendUint32(nil, size), bytes.Repeat([]byte{byte(i)}, size)...)
		if _, err := nc.Write(f[:size/2]); err != nil {
			t.Fatal(err)
		}
		sent += size / 2
		waitReceived(t, srv, sent) // read: the frame's rest is read in the middle of it
		if _, err := nc.Write(f[size/2:]); err != nil {
			t.Fatal(err)
		}
		sent += uint64(len(f) - size/2)
	}
	if err := <-recvd; err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	srv.rmu.Lock()
	arms, intrs := srv.stallArms, srv.intrs
	srv.rmu.Unlock()
	// Re-armed when less than the timeout is left of the 1.25 × timeout
	// set: at most once per quarter of it, and after each interruption
	// (whose deadline in the past replaced it: a Recv that took the role
	// from the reader goroutine, when it came back over idleRead late).
	most := 1 + uint64(took/(stall/4)) + intrs
	t.Logf("%d frames in %v, %d interruptions, the stall deadline armed %d times (at most %d)", frames, took, intrs, arms, most)
	if arms == 0 || arms > most {
		t.Fatalf("%d frames read in two parts in %v armed the stall deadline %d times, want 1 to %d", frames, took, arms, most)
	}
}

// The stall deadline, left armed after a frame, fires while the connection
// waits for the next one: a connection idle for longer than the stall
// timeout stays open, and the next frame comes.
func TestIdlePastTheStallTimeout(t *testing.T) {
	const stall = 50 * time.Millisecond
	nc, srv := acceptRaw(t, New(Options{StallTimeout: stall}))
	f := append(binary.BigEndian.AppendUint32(nil, 3), "one"...)
	if _, err := nc.Write(f[:5]); err != nil { // its rest is read in the middle of it
		t.Fatal(err)
	}
	waitReceived(t, srv, helloLen+5)
	if _, err := nc.Write(f[5:]); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"one", "two"} {
		b, err := srv.Recv(context.Background())
		if err != nil {
			t.Fatalf("Recv %q: %v", want, err)
		}
		got := string(b.Bytes())
		b.Release()
		if got != want {
			t.Fatalf("Recv = %q, want %q", got, want)
		}
		if want == "one" {
			time.Sleep(4 * stall) // idle: the scenario, not a wait for something
			if _, err := nc.Write(append(binary.BigEndian.AppendUint32(nil, 3), "two"...)); err != nil {
				t.Fatal(err)
			}
		}
	}
}
