package connpool

import (
	"errors"
	"io"
	"sync"
)

// ErrClosed is returned by Get after Close.
var ErrClosed = errors.New("connpool: closed")

// Pool hands out connections made by Dial: an idle one if there is one,
// else a new one. It holds at most as many as were ever in use at once.
type Pool[C io.Closer] struct {
	dial func() (C, error)

	mu     sync.Mutex
	idle   []C
	open   map[io.Closer]struct{} // every connection not yet closed, idle or in use
	closed bool
}

// New returns a pool whose connections dial makes.
func New[C io.Closer](dial func() (C, error)) *Pool[C] {
	return &Pool[C]{dial: dial, open: map[io.Closer]struct{}{}}
}

// Get returns an idle connection, or dials one.
func (p *Pool[C]) Get() (C, error) {
	var zero C
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return zero, ErrClosed
	}
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := p.dial()
	if err != nil {
		return zero, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return zero, ErrClosed
	}
	p.open[c] = struct{}{}
	return c, nil
}

// Put gives back a connection that Get returned and that is fit for the
// next call.
func (p *Pool[C]) Put(c C) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return // Close closed it
	}
	p.idle = append(p.idle, c)
}

// Discard closes a connection that Get returned and that failed.
func (p *Pool[C]) Discard(c C) {
	p.mu.Lock()
	delete(p.open, c)
	p.mu.Unlock()
	c.Close()
}

// Len is how many connections are open, idle or in use.
func (p *Pool[C]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.open)
}

// Close closes every connection, idle or in use; Get fails from then on.
func (p *Pool[C]) Close() error {
	p.mu.Lock()
	open := p.open
	p.open, p.idle, p.closed = nil, nil, true
	p.mu.Unlock()
	var errs []error
	for c := range open {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
