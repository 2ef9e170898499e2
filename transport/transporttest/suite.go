package transporttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/test/conformance"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Config says what to test and what the transport promises. Its
// Timeout also bounds how long a test that moves many bytes may go without
// a byte received, on connections that implement transport.Activity;
// however long the whole transfer takes, it fails only then.
type Config struct {
	conformance.Config
	// MaxMessageSize is the limit both sides were configured with.
	// Default transport.DefaultMaxMessageSize.
	MaxMessageSize int
	// MaxBuffered bounds, in bytes, how far a sender may get ahead of a
	// receiver that does not read (queues, windows, socket buffers).
	MaxBuffered int64
}

// Run runs the conformance suite. Every transport must pass it.
func Run(t *testing.T, cfg Config) {
	cfg.Config = cfg.Config.WithDefaults()
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = transport.DefaultMaxMessageSize
	}
	s := &suite{cfg: cfg}
	conformance.Run(t, s.cfg.Config, []conformance.Test{
		{"Addresses", s.testAddresses},
		{"Ordering", s.testOrdering},
		{"Sizes", s.testSizes},
		{"SendBuffer", s.testSendBuffer},
		{"SendVec", s.testSendVec},
		{"TooLarge", s.testTooLarge},
		{"ConcurrentSenders", s.testConcurrentSenders},
		{"ConcurrentReceivers", s.testConcurrentReceivers},
		{"Backpressure", s.testBackpressure},
		{"RecvContext", s.testRecvContext},
		{"RecvSignalContext", s.testRecvSignalContext},
		{"SendContext", s.testSendContext},
		{"CloseLocal", s.testCloseLocal},
		{"ClosePeer", s.testClosePeer},
		{"CloseUnblocksSend", s.testCloseUnblocksSend},
		{"DeliveredBeforeClose", s.testDeliveredBeforeClose},
		{"ListenerAccept", s.testListenerAccept},
		{"ManyConns", s.testManyConns},
		{"Activity", s.testActivity},
		{"Arrivals", s.testArrivals},
		{"Logged", s.testLogged},
	})
}

type suite struct{ cfg Config }

func (s *suite) ctx(t *testing.T) context.Context { return s.cfg.Context(t) }

// pair returns a connected client and server; both are closed when the test
// ends, then the listener.
func (s *suite) pair(t *testing.T) (client, server transport.Conn) {
	t.Helper()
	lis, err := s.cfg.Transport.Listen(s.cfg.Addr)
	if err != nil {
		t.Fatalf("Listen(%q): %v", s.cfg.Addr, err)
	}
	t.Cleanup(func() { lis.Close() })
	ctx := s.ctx(t)
	type res struct {
		c   transport.Conn
		err error
	}
	accepted := make(chan res, 1)
	go func() {
		c, err := lis.Accept(ctx)
		accepted <- res{c, err}
	}()
	client, err = s.cfg.Transport.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatalf("Dial(%s): %v", lis.Addr(), err)
	}
	t.Cleanup(func() { client.Close() })
	r := <-accepted
	if r.err != nil {
		t.Fatalf("Accept: %v", r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return client, r.c
}

// pattern fills a message whose bytes depend on seed and position, so a
// shifted, truncated or mixed-up message is detected.
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

func recvCopy(ctx context.Context, c transport.Conn) ([]byte, error) {
	b, err := c.Recv(ctx)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), b.Bytes()...)
	b.Release()
	return out, nil
}

// echo serves c: every message received is sent back, until c fails.
func echo(ctx context.Context, c transport.Conn) {
	for {
		b, err := c.Recv(ctx)
		if err != nil {
			return
		}
		err = c.Send(ctx, b.Bytes())
		b.Release()
		if err != nil {
			return
		}
	}
}

// startEcho runs echo on c until the test ends.
func startEcho(t *testing.T, ctx context.Context, c transport.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); echo(ctx, c) }()
	t.Cleanup(func() { c.Close(); wg.Wait() })
}

func (s *suite) testAddresses(t *testing.T) {
	client, server := s.pair(t)
	if client.RemoteAddr().String() != server.LocalAddr().String() {
		t.Errorf("client's remote %v != server's local %v", client.RemoteAddr(), server.LocalAddr())
	}
	if client.MaxMessageSize() != s.cfg.MaxMessageSize || server.MaxMessageSize() != s.cfg.MaxMessageSize {
		t.Errorf("MaxMessageSize: client %d, server %d, configured %d", client.MaxMessageSize(), server.MaxMessageSize(), s.cfg.MaxMessageSize)
	}
}

func (s *suite) testOrdering(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	const n = 2000
	// Both directions at once: each side sends n numbered messages of
	// varying size and checks it receives the other's in order.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, c := range []transport.Conn{client, server} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range n {
				msg := make([]byte, 8+i%300)
				binary.LittleEndian.PutUint64(msg, uint64(i))
				if err := c.Send(ctx, msg); err != nil {
					errs <- fmt.Errorf("send %d: %w", i, err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range n {
				msg, err := recvCopy(ctx, c)
				if err != nil {
					errs <- fmt.Errorf("recv %d: %w", i, err)
					return
				}
				if len(msg) != 8+i%300 || binary.LittleEndian.Uint64(msg) != uint64(i) {
					errs <- fmt.Errorf("message %d: got %d bytes numbered %d", i, len(msg), binary.LittleEndian.Uint64(msg))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// boundarySizes straddle the sizes where transports change behaviour:
// empty, inline limits, buffer and MTU sizes, fragment counts, 16 MiB.
func boundarySizes(max int) []int {
	sizes := []int{0, 1, 2, 3, 7, 8, 15, 16, 63, 64, 65, 127, 128, 255, 256, 511, 512,
		1023, 1024, 1025, 2047, 2048, 4095, 4096, 4097, 8191, 8192, 8193,
		16383, 16384, 65535, 65536, 65537, 262143, 262144, 1<<20 - 1, 1 << 20, 1<<20 + 1,
		4<<20 + 3, 16 << 20}
	out := sizes[:0]
	for _, n := range sizes {
		if n <= max {
			out = append(out, n)
		}
	}
	return out
}

func (s *suite) testSizes(t *testing.T) {
	client, server := s.pair(t)
	// Up to 16 MiB through tiny pools: slow on a loaded machine, so
	// only a stall fails it.
	ctx := s.progressCtx(t, client, server)
	startEcho(t, ctx, server)
	for _, n := range boundarySizes(s.cfg.MaxMessageSize) {
		want := pattern(uint64(n), n)
		if err := client.Send(ctx, want); err != nil {
			t.Fatalf("Send(%d bytes): %v", n, err)
		}
		got, err := recvCopy(ctx, client)
		if err != nil {
			t.Fatalf("Recv echo of %d bytes: %v", n, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d-byte message came back as %d bytes, first difference at %d", n, len(got), firstDiff(got, want))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func (s *suite) testSendBuffer(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	startEcho(t, ctx, server)
	for _, n := range []int{0, 1, 100, 4096, 70000, 3 << 20} {
		if n > s.cfg.MaxMessageSize {
			continue
		}
		b, err := client.NewSendBuffer(ctx, n)
		if err != nil {
			t.Fatalf("NewSendBuffer(%d): %v", n, err)
		}
		if b.Len() != n {
			t.Fatalf("NewSendBuffer(%d) returned %d bytes", n, b.Len())
		}
		want := pattern(uint64(n)+7, n)
		copy(b.Bytes(), want)
		if err := client.SendBuffer(ctx, b); err != nil {
			t.Fatalf("SendBuffer(%d): %v", n, err)
		}
		got, err := recvCopy(ctx, client)
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d-byte in-place message came back different (first difference at %d)", n, firstDiff(got, want))
		}
	}
	// A buffer that is released unsent costs nothing and sends nothing.
	b, err := client.NewSendBuffer(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	if err := client.Send(ctx, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if got, err := recvCopy(ctx, client); err != nil || string(got) != "after" {
		t.Fatalf("after a released buffer: got %q, %v", got, err)
	}
}

// testSendVec sends messages in parts (transport.VectorSender, where the
// connection has it), one at a time and in bursts of 8 sent before any
// echo is read; each message's parts are overwritten as soon as SendVec
// returns, and every echo must still be what was sent.
func (s *suite) testSendVec(t *testing.T) {
	client, server := s.pair(t)
	vs, ok := client.(transport.VectorSender)
	if !ok {
		t.Skip("the connection is not a transport.VectorSender")
	}
	ctx := s.progressCtx(t, client, server)
	startEcho(t, ctx, server)
	shapes := [][]int{{}, {0}, {5}, {0, 100, 0}, {17, 70000}, {3, 1 << 20, 7, 4096}, {40, 3 << 20}}
	seed := uint64(0)
	send := func(shape []int) []byte {
		seed++
		var parts [][]byte
		total := 0
		for _, n := range shape {
			total += n
		}
		if total > s.cfg.MaxMessageSize {
			return nil
		}
		want := pattern(seed, total)
		off := 0
		for _, n := range shape {
			parts = append(parts, append([]byte(nil), want[off:off+n]...))
			off += n
		}
		if err := vs.SendVec(ctx, parts); err != nil {
			t.Fatalf("SendVec(%v): %v", shape, err)
		}
		for _, p := range parts {
			clear(p) // the caller's to reuse once SendVec returned
		}
		return want
	}
	check := func(shape []int, want []byte) {
		got, err := recvCopy(ctx, client)
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("message in parts %v came back different (%d bytes, want %d; first difference at %d)", shape, len(got), len(want), firstDiff(got, want))
		}
	}
	for _, shape := range shapes {
		if want := send(shape); want != nil {
			check(shape, want)
		}
	}
	for range 2 {
		var sent [][]byte
		var sentShapes [][]int
		for i := range 8 {
			shape := shapes[i%len(shapes)]
			if want := send(shape); want != nil {
				sent, sentShapes = append(sent, want), append(sentShapes, shape)
			}
		}
		for i, want := range sent {
			check(sentShapes[i], want)
		}
	}
	big := [][]byte{make([]byte, s.cfg.MaxMessageSize), {1}}
	if err := vs.SendVec(ctx, big); !errors.Is(err, transport.ErrMessageTooLarge) {
		t.Fatalf("SendVec(max+1 bytes in two parts) = %v, want ErrMessageTooLarge", err)
	}
	if want := send([]int{10, 20}); want != nil {
		check([]int{10, 20}, want)
	}
}

func (s *suite) testTooLarge(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.progressCtx(t, client, server)
	startEcho(t, ctx, server)
	big := make([]byte, s.cfg.MaxMessageSize+1)
	if err := client.Send(ctx, big); !errors.Is(err, transport.ErrMessageTooLarge) {
		t.Fatalf("Send(max+1 bytes) = %v, want ErrMessageTooLarge", err)
	}
	if _, err := client.NewSendBuffer(ctx, s.cfg.MaxMessageSize+1); !errors.Is(err, transport.ErrMessageTooLarge) {
		t.Fatalf("NewSendBuffer(max+1 bytes) = %v, want ErrMessageTooLarge", err)
	}
	// The connection still works, at the limit too.
	want := pattern(1, s.cfg.MaxMessageSize)
	if err := client.Send(ctx, want); err != nil {
		t.Fatalf("Send(max bytes) after refusal: %v", err)
	}
	got, err := recvCopy(ctx, client)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("echo of max-size message: %d bytes, %v", len(got), err)
	}
}

func (s *suite) testConcurrentSenders(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	const senders, each = 8, 300
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				msg := pattern(uint64(g*each+i), 16+(i*37)%9000)
				binary.LittleEndian.PutUint32(msg, uint32(g))
				binary.LittleEndian.PutUint32(msg[4:], uint32(i))
				if err := client.Send(ctx, msg); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// One receiver: each sender's messages arrive whole and in its order.
	next := make([]int, senders)
	for range senders * each {
		msg, err := recvCopy(ctx, server)
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		g, i := int(binary.LittleEndian.Uint32(msg)), int(binary.LittleEndian.Uint32(msg[4:]))
		if g >= senders || i != next[g] {
			t.Fatalf("got message %d of sender %d, want %d", i, g, next[min(g, senders-1)])
		}
		want := pattern(uint64(g*each+i), 16+(i*37)%9000)
		if !bytes.Equal(msg[8:], want[8:]) {
			t.Fatalf("message %d of sender %d corrupted", i, g)
		}
		next[g]++
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func (s *suite) testConcurrentReceivers(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	const total, receivers = 3000, 6
	var (
		mu   sync.Mutex
		seen = make(map[uint32]int)
		wg   sync.WaitGroup
	)
	recvCtx, stop := context.WithCancel(ctx)
	defer stop()
	for range receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				msg, err := recvCopy(recvCtx, server)
				if err != nil {
					return
				}
				mu.Lock()
				seen[binary.LittleEndian.Uint32(msg)]++
				done := len(seen) == total
				mu.Unlock()
				if done {
					stop()
				}
			}
		}()
	}
	var sw sync.WaitGroup
	for g := range 4 {
		sw.Add(1)
		go func() {
			defer sw.Done()
			for i := g; i < total; i += 4 {
				msg := make([]byte, 4+i%100)
				binary.LittleEndian.PutUint32(msg, uint32(i))
				if err := client.Send(ctx, msg); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	sw.Wait()
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("timed out with %d of %d messages received", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %d received %d times", id, n)
		}
	}
	if len(seen) != total {
		t.Errorf("received %d distinct messages, want %d", len(seen), total)
	}
}

// testBackpressure: a receiver that does not read makes Send block (and
// honour its context) before the sender is more than MaxBuffered ahead; once
// the receiver reads, everything accepted arrives, in order, and nothing
// that was refused does.
func (s *suite) testBackpressure(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	const size = 256 << 10
	var accepted int64
	blocked := false
	for n := 0; accepted <= s.cfg.MaxBuffered; n++ {
		msg := pattern(uint64(n), size)
		binary.LittleEndian.PutUint64(msg, uint64(n))
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := client.Send(sctx, msg)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			blocked = true
			break
		}
		if err != nil {
			t.Fatalf("Send %d: %v", n, err)
		}
		accepted += size
	}
	if !blocked {
		t.Fatalf("sender got %d bytes ahead of a receiver that does not read without blocking (bound %d)", accepted, s.cfg.MaxBuffered)
	}
	// The end marker waits for room, which the receiver makes below.
	endSent := make(chan error, 1)
	go func() { endSent <- client.Send(ctx, []byte("end")) }()
	for i := int64(0); i < accepted/size; i++ {
		msg, err := recvCopy(ctx, server)
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if len(msg) != size || binary.LittleEndian.Uint64(msg) != uint64(i) {
			t.Fatalf("message %d: %d bytes numbered %d", i, len(msg), binary.LittleEndian.Uint64(msg))
		}
	}
	if msg, err := recvCopy(ctx, server); err != nil || string(msg) != "end" {
		t.Fatalf("after the %d accepted messages: got %d bytes (%v), want the end marker: a refused Send was delivered", accepted/size, len(msg), err)
	}
	if err := <-endSent; err != nil {
		t.Fatalf("Send end marker: %v", err)
	}
}

func (s *suite) testRecvContext(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := server.Recv(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv(canceled ctx) = %v, want context.Canceled", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := server.Recv(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv(expiring ctx) = %v, want context.DeadlineExceeded", err)
	}
	// Giving up on a Recv loses nothing.
	if err := client.Send(ctx, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if msg, err := recvCopy(ctx, server); err != nil || string(msg) != "still here" {
		t.Fatalf("after abandoned Recvs: %q, %v", msg, err)
	}
}

// signalCtx is a context whose Done channel delivers one value per signal
// instead of being closed, as the RPC client's reader is asked to step
// aside (rpc/clientturn.go): Err reports Canceled while signalled.
type signalCtx struct {
	context.Context // for Deadline and Value: never done itself
	done            chan struct{}
	signalled       atomic.Bool
}

func (c *signalCtx) Done() <-chan struct{} { return c.done }
func (c *signalCtx) Err() error {
	if c.signalled.Load() {
		return context.Canceled
	}
	return nil
}

// testRecvSignalContext: a Recv gives up when its ctx's Done delivers a
// value, not only when it is closed, and giving up so loses nothing:
// messages arriving while Recvs are signalled, before or while they wait,
// all come out once, in order.
func (s *suite) testRecvSignalContext(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	const n = 64
	sent := make(chan error, 1)
	go func() {
		for i := range n {
			if err := client.Send(ctx, []byte{byte(i)}); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	sc := &signalCtx{Context: context.Background(), done: make(chan struct{}, 1)}
	gaveUp := 0
	for next := 0; next < n; {
		signalled := make(chan struct{})
		go func() {
			defer close(signalled)
			sc.signalled.Store(true)
			sc.done <- struct{}{}
		}()
		b, err := server.Recv(sc)
		<-signalled
		switch {
		case err == nil:
			if got := b.Bytes(); len(got) != 1 || int(got[0]) != next {
				t.Fatalf("message %d: got %v", next, got)
			}
			b.Release()
			next++
		case errors.Is(err, context.Canceled):
			gaveUp++
		default:
			t.Fatalf("Recv(signalled ctx) = %v, want a message or context.Canceled", err)
		}
		// Take the signal back, whether or not Recv consumed it.
		sc.signalled.Store(false)
		select {
		case <-sc.done:
		default:
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d Recvs gave up, %d messages", gaveUp, n)
	// With nothing to receive, a Recv signalled before it starts, and one
	// signalled while it waits, give up. (Either order must pass; the
	// yields make the second the likely one.)
	for _, before := range []bool{true, false} {
		sc.signalled.Store(false)
		select {
		case <-sc.done:
		default:
		}
		if before {
			sc.signalled.Store(true)
			sc.done <- struct{}{}
		}
		gave := make(chan error, 1)
		go func() {
			_, err := server.Recv(sc)
			gave <- err
		}()
		if !before {
			for range 10 {
				runtime.Gosched()
			}
			sc.signalled.Store(true)
			sc.done <- struct{}{}
		}
		what := fmt.Sprintf("Recv(ctx signalled, before it started: %v)", before)
		if err := s.waitErr(t, what, gave); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s = %v, want context.Canceled", what, err)
		}
	}
}

// testSendContext: a send whose context is already done fails with the
// context's error and sends nothing, whichever way it is made.
func (s *suite) testSendContext(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := client.Send(done, []byte("never")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send(canceled ctx) = %v, want context.Canceled", err)
	}
	if _, err := client.NewSendBuffer(done, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("NewSendBuffer(canceled ctx) = %v, want context.Canceled", err)
	}
	b, err := client.NewSendBuffer(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	copy(b.Bytes(), "never")
	if err := client.SendBuffer(done, b); !errors.Is(err, context.Canceled) {
		t.Fatalf("SendBuffer(canceled ctx) = %v, want context.Canceled", err)
	}
	if err := client.Send(ctx, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if msg, err := recvCopy(ctx, server); err != nil || string(msg) != "after" {
		t.Fatalf("first message received: %q, %v; a send with a done context went out", msg, err)
	}
}

// waitErr waits for a blocked call's error, failing the test on a hang.
func (s *suite) waitErr(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(s.cfg.Timeout):
		t.Fatalf("%s still blocked after %v", what, s.cfg.Timeout)
		return nil
	}
}

func (s *suite) testCloseLocal(t *testing.T) {
	client, _ := s.pair(t)
	ctx := s.ctx(t)
	pending := make(chan error, 1)
	go func() { _, err := client.Recv(ctx); pending <- err }()
	if err := client.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.waitErr(t, "Recv pending at Close", pending); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("pending Recv = %v, want ErrClosed", err)
	}
	select {
	case <-client.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := client.Send(ctx, []byte("x")); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send after Close = %v, want ErrClosed", err)
	}
	if _, err := client.Recv(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Recv after Close = %v, want ErrClosed", err)
	}
	if _, err := client.NewSendBuffer(ctx, 1); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("NewSendBuffer after Close = %v, want ErrClosed", err)
	}
	if err := client.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func (s *suite) testClosePeer(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	pending := make(chan error, 1)
	go func() { _, err := server.Recv(ctx); pending <- err }()
	client.Close()
	if err := s.waitErr(t, "server Recv after the client closed", pending); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("server Recv = %v, want ErrClosed", err)
	}
	select {
	case <-server.Done():
	case <-time.After(s.cfg.Timeout):
		t.Fatal("server's Done not closed after the peer closed")
	}
	if err := server.Send(ctx, []byte("x")); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send to a closed peer = %v, want ErrClosed", err)
	}
}

func (s *suite) testCloseUnblocksSend(t *testing.T) {
	for _, side := range []string{"local", "peer"} {
		t.Run(side, func(t *testing.T) {
			client, server := s.pair(t)
			ctx := s.ctx(t)
			// Fill every queue and window until a Send blocks (its
			// deadline expires), then block one more Send and close.
			msg := make([]byte, 256<<10)
			for {
				sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				err := client.Send(sctx, msg)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					break
				}
				if err != nil {
					t.Fatalf("Send: %v", err)
				}
			}
			// A Send blocked when its own side closes fails; when the
			// peer closes, it may still complete (the peer drains what
			// is in flight while closing), but the Sends after it fail.
			blocked := make(chan error, 1)
			go func() {
				for {
					if err := client.Send(ctx, msg); err != nil {
						blocked <- err
						return
					}
				}
			}()
			if side == "local" {
				client.Close()
			} else {
				server.Close()
			}
			if err := s.waitErr(t, "Send blocked at Close", blocked); !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("blocked Send = %v, want ErrClosed", err)
			}
		})
	}
}

// testDeliveredBeforeClose: every message whose Send returned before Close
// reaches the peer, then the peer sees the end. The receiver reads only
// after the close, so the sender sends until the transport pushes back.
func (s *suite) testDeliveredBeforeClose(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	sent := 0
	for ; sent < 50; sent++ {
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := client.Send(sctx, pattern(uint64(sent), 1000+sent))
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if sent == 0 {
		t.Fatal("not one message could be sent")
	}
	client.Close()
	for i := range sent {
		msg, err := recvCopy(ctx, server)
		if err != nil {
			t.Fatalf("message %d of %d sent before Close: %v", i, sent, err)
		}
		if !bytes.Equal(msg, pattern(uint64(i), 1000+i)) {
			t.Fatalf("message %d corrupted", i)
		}
	}
	if _, err := server.Recv(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Recv after the last message = %v, want ErrClosed", err)
	}
}

func (s *suite) testListenerAccept(t *testing.T) {
	lis, err := s.cfg.Transport.Listen(s.cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := s.ctx(t)
	actx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := lis.Accept(actx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept(expiring ctx) = %v, want DeadlineExceeded", err)
	}
	pending := make(chan error, 1)
	go func() { _, err := lis.Accept(ctx); pending <- err }()
	addr := lis.Addr().String()
	lis.Close()
	if err := s.waitErr(t, "Accept pending at Close", pending); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Accept after Close = %v, want ErrClosed", err)
	}
	if c, err := s.cfg.Transport.Dial(ctx, addr); err == nil {
		c.Close()
		t.Fatal("Dial to a closed listener succeeded")
	}
}

func (s *suite) testManyConns(t *testing.T) {
	lis, err := s.cfg.Transport.Listen(s.cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx := s.ctx(t)
	const n = 16
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ew sync.WaitGroup
		for range n {
			c, err := lis.Accept(ctx)
			if err != nil {
				t.Error(err)
				break
			}
			ew.Add(1)
			go func() { defer ew.Done(); defer c.Close(); echo(ctx, c) }()
		}
		ew.Wait()
	}()
	var cw sync.WaitGroup
	for i := range n {
		cw.Add(1)
		go func() {
			defer cw.Done()
			c, err := s.cfg.Transport.Dial(ctx, lis.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for j := range 20 {
				want := pattern(uint64(i*100+j), 100+j)
				if err := c.Send(ctx, want); err != nil {
					t.Error(err)
					return
				}
				got, err := recvCopy(ctx, c)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("conn %d message %d: %v", i, j, err)
					return
				}
			}
		}()
	}
	cw.Wait()
	wg.Wait()
}

// testActivity: a connection that implements transport.Activity counts at
// least the bytes of every message it received, and its count never goes
// down. Transports without it skip.
func (s *suite) testActivity(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	for _, side := range []struct {
		name     string
		from, to transport.Conn
	}{{"server", client, server}, {"client", server, client}} {
		act, ok := side.to.(transport.Activity)
		if !ok {
			t.Skipf("%T does not implement transport.Activity", side.to)
		}
		last := act.BytesReceived()
		for _, n := range []int{0, 1, 1000, 100 << 10} {
			n = min(n, s.cfg.MaxMessageSize)
			if err := side.from.Send(ctx, pattern(uint64(n), n)); err != nil {
				t.Fatal(err)
			}
			if _, err := recvCopy(ctx, side.to); err != nil {
				t.Fatal(err)
			}
			got := act.BytesReceived()
			if got < last+uint64(n) {
				t.Fatalf("%s: BytesReceived %d after a %d-byte message, was %d", side.name, got, n, last)
			}
			last = got
		}
	}
}

// testArrivals: a connection that implements transport.Arrivals calls the
// callback once for the next message that arrives while nobody is in Recv,
// refuses (false) while a message is queued, forgets a cancelled callback,
// and calls it when the peer closes. Transports without it skip.
func (s *suite) testArrivals(t *testing.T) {
	client, server := s.pair(t)
	ctx := s.ctx(t)
	arr, ok := server.(transport.Arrivals)
	if !ok {
		t.Skipf("%T does not implement transport.Arrivals", server)
	}
	calls := make(chan int, 8)
	n := 0
	f := func() { n++; calls <- n }
	if !arr.OnArrival(f) {
		t.Fatal("OnArrival with nothing queued reported false")
	}
	for i := range 2 {
		if err := client.Send(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-calls:
	case <-ctx.Done():
		t.Fatal("a message arrived and the callback was not called")
	}
	// Queued: the reader would find it in Recv, so no callback is taken.
	deadline := time.Now().Add(s.cfg.Timeout)
	for arr.OnArrival(f) {
		// The second message may not be delivered yet: cancel and retry.
		arr.OnArrival(nil)
		if time.Now().After(deadline) {
			t.Fatal("OnArrival with a message queued kept reporting true")
		}
		runtime.Gosched()
	}
	// The second message may have arrived between a retry's OnArrival(f)
	// and its cancel, and been reported: a call that counts.
	want := 2 + len(calls)
	for len(calls) > 0 {
		<-calls
	}
	for i := range 2 {
		if b, err := recvCopy(ctx, server); err != nil || len(b) != 1 || b[0] != byte(i) {
			t.Fatalf("Recv %d: %v, %v", i, b, err)
		}
	}
	// A cancelled callback is not called for the next message.
	if !arr.OnArrival(f) {
		t.Fatal("OnArrival after the queue emptied reported false")
	}
	arr.OnArrival(nil)
	if err := client.Send(ctx, []byte{2}); err != nil {
		t.Fatal(err)
	}
	if b, err := recvCopy(ctx, server); err != nil || len(b) != 1 {
		t.Fatalf("Recv: %v, %v", b, err)
	}
	// The end is an arrival too.
	if !arr.OnArrival(f) {
		t.Fatal("OnArrival on an empty open connection reported false")
	}
	client.Close()
	select {
	case <-calls:
	case <-ctx.Done():
		t.Fatal("the peer closed and the callback was not called")
	}
	if got := len(calls); got != 0 || n != want {
		t.Fatalf("the callback ran %d times, want %d (once per arrival it was set for)", n, want)
	}
}

// testLogged: a listener that implements transport.Logged takes a logger
// while it serves, and goes on serving.
func (s *suite) testLogged(t *testing.T) {
	lis, err := s.cfg.Transport.Listen(s.cfg.Addr)
	if err != nil {
		t.Fatalf("Listen(%q): %v", s.cfg.Addr, err)
	}
	defer lis.Close()
	logged, ok := lis.(transport.Logged)
	if !ok {
		t.Skipf("%T does not implement transport.Logged", lis)
	}
	logged.SetLogger(zap.NewNop())
	logged.SetLogger(nil) // a nil logger is a no-op one, not a crash
	ctx := s.ctx(t)
	accepted := make(chan transport.Conn, 1)
	go func() {
		c, _ := lis.Accept(ctx) // nil on error
		accepted <- c
	}()
	c, err := s.cfg.Transport.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatalf("Dial after SetLogger: %v", err)
	}
	defer c.Close()
	srv := <-accepted
	if srv == nil {
		t.Fatal("Accept after SetLogger failed")
	}
	srv.Close()
}
