package accept

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeListener hands out what its script says: an error or a connection
// per Accept, then blocks until closed.
type fakeListener struct {
	script chan any // error or net.Conn
	done   chan struct{}
	once   sync.Once
}

func newFake(items ...any) *fakeListener {
	f := &fakeListener{script: make(chan any, len(items)), done: make(chan struct{})}
	for _, it := range items {
		f.script <- it
	}
	return f
}

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case it := <-f.script:
		if err, ok := it.(error); ok {
			return nil, err
		}
		return it.(net.Conn), nil
	case <-f.done:
		return nil, net.ErrClosed
	}
}

func (f *fakeListener) Close() error   { f.once.Do(func() { close(f.done) }); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// pipeConn is a transport.Conn stand-in: the handshake wraps a socket in
// it, and it is done when closed.
type pipeConn struct {
	transport.Conn
	nc   net.Conn
	done chan struct{}
	once sync.Once
}

func (p *pipeConn) Close() error {
	p.once.Do(func() { close(p.done); p.nc.Close() })
	return nil
}
func (p *pipeConn) Done() <-chan struct{} { return p.done }

func okHandshake(_ context.Context, nc net.Conn) (transport.Conn, error) {
	return &pipeConn{nc: nc, done: make(chan struct{})}, nil
}

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

func TestTemporary(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{acceptErr(syscall.EMFILE), true},
		{acceptErr(syscall.ENFILE), true},
		{acceptErr(syscall.ENOBUFS), true},
		{acceptErr(syscall.ENOMEM), true},
		{acceptErr(syscall.ECONNABORTED), true},
		{fmt.Errorf("wrapped: %w", acceptErr(syscall.EMFILE)), true},
		{tempErr{}, true},
		{acceptErr(syscall.EINVAL), false},
		{net.ErrClosed, false},
		{errors.New("something else"), false},
	}
	for _, tc := range cases {
		if got := Temporary(tc.err); got != tc.want {
			t.Errorf("Temporary(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

type tempErr struct{}

func (tempErr) Error() string   { return "temporary" }
func (tempErr) Temporary() bool { return true }

func TestBackoffDoublesTo1s(t *testing.T) {
	var got []time.Duration
	d := time.Duration(0)
	for range 10 {
		d = nextBackoff(d)
		got = append(got, d)
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("backoff sequence %v, want %v ms", got, want)
		}
	}
}

// The accept loop of old ended for good at the first EMFILE. Now it
// retries temporary errors, logs them, and serves the next connection.
func TestTemporaryErrorsDoNotStopTheListener(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	core, logs := observer.New(zap.InfoLevel)
	fl := newFake(acceptErr(syscall.EMFILE), acceptErr(syscall.ENFILE), acceptErr(syscall.ECONNABORTED), a)
	l := New(fl, okHandshake, zap.New(core), nil)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := l.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept after temporary errors: %v", err)
	}
	c.Close()
	if n := logs.FilterMessage("accept failed; retrying").Len(); n != 3 {
		t.Fatalf("%d lines for 3 temporary accept errors, want 3", n)
	}
}

// A permanent error ends the listener, and Accept says why.
func TestPermanentErrorEndsTheListener(t *testing.T) {
	l := New(newFake(acceptErr(syscall.EINVAL)), okHandshake, nil, nil)
	defer l.Close()
	_, err := l.Accept(context.Background())
	if !errors.Is(err, transport.ErrClosed) || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Accept = %v, want ErrClosed wrapping the accept error", err)
	}
}

// Over MaxConns a socket is closed at once, with a line; a place comes back
// when a connection ends.
func TestMaxConns(t *testing.T) {
	var peers, socks []net.Conn
	for range 3 {
		a, b := net.Pipe()
		socks, peers = append(socks, a), append(peers, b)
	}
	defer func() {
		for _, p := range peers {
			p.Close()
		}
	}()
	core, logs := observer.New(zap.InfoLevel)
	fl := newFake(socks[0], socks[1])
	l := NewWithOptions(fl, okHandshake, Options{Log: NewLog(zap.New(core), ""), MaxConns: 1})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The second socket is over the limit: closed, so its peer reads EOF.
	if _, err := peers[1].Read(make([]byte, 1)); err == nil {
		t.Fatal("the socket over the limit was not closed")
	}
	for logs.FilterMessage("refused connection: at the connection limit").Len() == 0 {
		time.Sleep(time.Millisecond) // the line follows the close
	}
	// Once the first connection ends, a new one is served.
	first.Close()
	for l.conns.Load() != 0 {
		time.Sleep(time.Millisecond)
	}
	fl.script <- socks[2]
	third, err := l.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept after a connection ended: %v", err)
	}
	third.Close()
}

func TestLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	var r Limiter
	r.init()
	r.now = func() time.Time { return now }
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core)
	for range 100 {
		r.Warn(log, "refused")
	}
	if n := logs.Len(); n != logBurst {
		t.Fatalf("%d of 100 lines at once passed, want the burst of %d", n, logBurst)
	}
	now = now.Add(time.Second)
	r.Warn(log, "refused")
	all := logs.All()
	if len(all) != logBurst+1 || all[logBurst].ContextMap()["suppressed"] != int64(100-logBurst) {
		t.Fatalf("after a second: %d lines, last %v; want one more, counting the %d held back", len(all), all[len(all)-1].ContextMap(), 100-logBurst)
	}
	// A quiet spell refills the burst, no more.
	now = now.Add(time.Hour)
	for range 100 {
		r.Warn(log, "refused")
	}
	if n := logs.Len(); n != 2*logBurst+1 {
		t.Fatalf("%d lines after an hour's quiet and 100 more, want %d", n, 2*logBurst+1)
	}
}

// SetLogger redirects the listener's lines while it runs.
func TestSetLogger(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	fl := newFake()
	l := New(fl, func(context.Context, net.Conn) (transport.Conn, error) {
		return nil, errors.New("bad hello")
	}, nil, nil)
	defer l.Close()
	var _ transport.Logged = l
	core, logs := observer.New(zap.InfoLevel)
	l.SetLogger(zap.New(core))
	fl.script <- a
	for logs.FilterMessage("refused connection").Len() == 0 {
		time.Sleep(time.Millisecond)
	}
}
