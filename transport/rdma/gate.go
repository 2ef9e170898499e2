package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// errHandshakesBusy is wrapped when a server refuses a hello because the
// peer's address already has too many handshakes waiting for a place.
var errHandshakesBusy = errors.New("too many handshakes in progress from this address")

// gate bounds a server's handshakes past the client's hello, each of which
// holds a queue pair and its receive buffers until the client says ready
// (docs/rdma.md, "Handshakes in progress"): at most global at once, at
// most perSource from one source address. A handshake beyond waits for a
// place without a queue pair; a place that frees goes to the sources with
// waiters in turn, so a source that floods the server with hellos holds
// perSource places and waits behind everyone else for more. A source with
// maxWaiting handshakes waiting is refused at once, and so is any source
// once totalWaiting wait in all: waiting costs a goroutine and a socket,
// which the bound keeps to a known number.
type gate struct {
	global, perSource        int
	maxWaiting, totalWaiting int

	mu      sync.Mutex
	held    int // places taken
	waiting int // handshakes waiting, all sources
	sources map[netip.Addr]*gateSource
	turn    []*gateSource // sources with waiters, the next to be served first
}

// gateSource is one address's places and waiters; it exists while it has
// either.
type gateSource struct {
	addr    netip.Addr
	held    int
	waiters []chan struct{} // closed when given a place, first come first served
}

func newGate(global, perSource int) *gate {
	return &gate{
		global: global, perSource: perSource,
		maxWaiting: 4 * global, totalWaiting: 16 * global,
		sources: make(map[netip.Addr]*gateSource),
	}
}

// sourceOf is the address a bootstrap connection comes from; an IPv4
// address is one source whether it arrived mapped into IPv6 or not.
func sourceOf(a net.Addr) netip.Addr {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// enter takes a place for a handshake from src, waiting for one until ctx
// ends (waited says it had to); leave gives it back.
func (g *gate) enter(ctx context.Context, src netip.Addr) (waited bool, err error) {
	w, err := g.try(src)
	if err != nil || w == nil {
		return false, err
	}
	select {
	case <-w:
		return true, nil
	case <-ctx.Done():
	}
	if !g.cancel(src, w) {
		// Given a place as ctx ended: give it back.
		g.leave(src)
	}
	return true, fmt.Errorf("waiting for one of the %d handshakes a server runs at once (%d per source address): %w", g.global, g.perSource, ctx.Err())
}

// try takes a place if one is free and nobody from src waits for one
// (nil, nil), or queues a waiter whose channel is closed when it is given
// one, or refuses.
func (g *gate) try(src netip.Addr) (chan struct{}, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sources[src]
	if s == nil {
		s = &gateSource{addr: src}
		g.sources[src] = s
	}
	if len(s.waiters) == 0 && s.held < g.perSource && g.held < g.global {
		s.held++
		g.held++
		return nil, nil
	}
	if len(s.waiters) >= g.maxWaiting || g.waiting >= g.totalWaiting {
		g.forgetLocked(s)
		return nil, fmt.Errorf("%w: %d hold a queue pair (%d in all, at most %d and %d per address), %d wait from this address, %d in all",
			errHandshakesBusy, s.held, g.held, g.global, g.perSource, len(s.waiters), g.waiting)
	}
	w := make(chan struct{})
	if len(s.waiters) == 0 {
		g.turn = append(g.turn, s)
	}
	s.waiters = append(s.waiters, w)
	g.waiting++
	return w, nil
}

// cancel withdraws waiter w of src; false when it was given a place
// already.
func (g *gate) cancel(src netip.Addr, w chan struct{}) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sources[src]
	if s == nil {
		return false
	}
	i := slices.Index(s.waiters, w)
	if i < 0 {
		return false
	}
	s.waiters = slices.Delete(s.waiters, i, i+1)
	g.waiting--
	if len(s.waiters) == 0 {
		g.turn = slices.DeleteFunc(g.turn, func(x *gateSource) bool { return x == s })
	}
	g.forgetLocked(s)
	return true
}

// leave gives back a place src took, to the next waiter in turn.
func (g *gate) leave(src netip.Addr) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sources[src]
	s.held--
	g.held--
	g.grantLocked()
	g.forgetLocked(s)
}

// grantLocked gives free places to waiters: the first source in turn that
// may take one more gets it for its oldest waiter and goes to the back of
// the turn.
func (g *gate) grantLocked() {
	for g.held < g.global {
		i := slices.IndexFunc(g.turn, func(s *gateSource) bool { return s.held < g.perSource })
		if i < 0 {
			return
		}
		s := g.turn[i]
		w := s.waiters[0]
		s.waiters = s.waiters[1:]
		g.waiting--
		s.held++
		g.held++
		close(w)
		g.turn = slices.Delete(g.turn, i, i+1)
		if len(s.waiters) > 0 {
			g.turn = append(g.turn, s)
		}
	}
}

// forgetLocked drops a source that holds and waits for nothing.
func (g *gate) forgetLocked(s *gateSource) {
	if s.held == 0 && len(s.waiters) == 0 {
		delete(g.sources, s.addr)
	}
}

// inProgress is how many places are taken, and how many handshakes wait.
func (g *gate) inProgress() (held, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, g.waiting
}
