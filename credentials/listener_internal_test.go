package credentials

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
)

// fakeListener hands out one end of a pipe per Accept, and tells the test,
// for each call, how many connections it had handed out and not seen
// released by then.
type fakeListener struct {
	handed   int
	released *atomic.Int32
	calls    chan int // connections in handshake when Accept was called
	done     chan struct{}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case f.calls <- f.handed - int(f.released.Load()):
	case <-f.done:
		return nil, net.ErrClosed
	}
	select {
	case <-f.done:
		return nil, net.ErrClosed
	default:
	}
	f.handed++
	a, _ := net.Pipe()
	return a, nil
}
func (f *fakeListener) Close() error   { close(f.done); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// blockingCreds' server handshakes wait for a release, or the end.
type blockingCreds struct {
	TransportCredentials
	entered chan struct{}
	release chan struct{}
	stop    chan struct{}
}

func (b blockingCreds) ServerHandshake(c net.Conn) (net.Conn, AuthInfo, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
		return c, nil, nil
	case <-b.stop:
		c.Close()
		return nil, nil, net.ErrClosed
	}
}

func (b blockingCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, AuthInfo, error) {
	panic("unused")
}

// With MaxHandshakes 2 and both handshakes stuck, the listener does not
// accept a third connection until one of them is done and accepted.
func TestListenerBoundsHandshakes(t *testing.T) {
	var released atomic.Int32
	fl := &fakeListener{released: &released, calls: make(chan int, 8), done: make(chan struct{})}
	creds := blockingCreds{entered: make(chan struct{}, 8), release: make(chan struct{}, 8), stop: fl.done}
	l := NewListener(fl, creds, ListenerOptions{MaxHandshakes: 2})
	defer l.Close()
	<-fl.calls
	<-fl.calls
	<-creds.entered
	<-creds.entered
	released.Add(1)
	creds.release <- struct{}{} // one handshake ends; its connection waits for Accept
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := <-fl.calls; n != 1 {
		t.Fatalf("the third Accept came with %d connections in handshake, want 1 (the bound is 2)", n)
	}
}
