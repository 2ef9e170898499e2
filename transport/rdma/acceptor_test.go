package rdma

import (
	"context"
	"sync"

	"github.com/rdmarpc/rdmarpc/transport"
)

// acceptor is a test server's accept loop: it keeps every connection its
// listener accepts, and runs serve (when not nil) on each in a goroutine
// of its own.
type acceptor struct {
	loop, serving sync.WaitGroup
	mu            sync.Mutex
	conns         []transport.Conn
}

// acceptAll accepts on lis until lis closes or ctx ends.
func acceptAll(ctx context.Context, lis transport.Listener, serve func(transport.Conn)) *acceptor {
	a := &acceptor{}
	a.loop.Go(func() {
		for {
			c, err := lis.Accept(ctx)
			if err != nil {
				return
			}
			a.mu.Lock()
			a.conns = append(a.conns, c)
			a.mu.Unlock()
			if serve != nil {
				a.serving.Go(func() { serve(c) })
			}
		}
	})
	return a
}

// accepted is the connections accepted so far.
func (a *acceptor) accepted() []transport.Conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]transport.Conn(nil), a.conns...)
}

// closeAll waits for the accept loop to end (close the listener or end
// its ctx first), closes every connection it accepted, and waits for the
// serving goroutines.
func (a *acceptor) closeAll() {
	a.loop.Wait()
	for _, c := range a.accepted() {
		c.Close()
	}
	a.serving.Wait()
}

// echo answers every message on c with its bytes until c ends.
func echo(ctx context.Context) func(transport.Conn) {
	return func(c transport.Conn) {
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
}
