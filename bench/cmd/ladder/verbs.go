package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/rdmarpc/rdmarpc/transport/rdma/rawverbs"
)

// verbsRung is the raw ping-pong: a client keeping conc requests in flight
// on one QP, a server echoing each, each on its own goroutine and CQ.
func verbsRung(d *rawverbs.Device, sleep bool) runner {
	return func(c *cell) (func() (lats, error), error) {
		cl, err := d.NewEndpoint(c.size, c.conc, sleep)
		if err != nil {
			return nil, err
		}
		sv, err := d.NewEndpoint(c.size, c.conc, sleep)
		if err != nil {
			cl.Close()
			return nil, err
		}
		if err := d.Connect(cl, sv); err != nil {
			cl.Close()
			sv.Close()
			return nil, err
		}
		srvErr := make(chan error, 1)
		cliRes := make(chan error, 1)
		l := newLats()
		go func() { srvErr <- verbsServe(sv) }()
		go func() { cliRes <- verbsDrive(cl, c, l) }()
		return func() (lats, error) {
			err := errors.Join(<-cliRes, <-srvErr)
			cl.Close()
			sv.Close()
			return *l, err
		}, nil
	}
}

// verbsServe echoes every request until the quit message.
func verbsServe(e *rawverbs.Endpoint) error {
	for {
		cs, err := e.Poll()
		if err != nil {
			return err
		}
		for _, c := range cs {
			switch {
			case c.Err != nil:
				return fmt.Errorf("server: %w", c.Err)
			case !c.Recv:
				continue // a send completed
			case c.Quit:
				return nil
			}
			if err := e.PostRecv(c.Buf); err != nil {
				return err
			}
			if err := e.Send(c.Len); err != nil {
				return err
			}
		}
	}
}

// verbsDrive keeps conc requests in flight until the cell stops, recording
// the round trips of those sent while measuring; replies come in order.
func verbsDrive(e *rawverbs.Endpoint, c *cell, l *lats) error {
	type req struct {
		t        time.Time
		measured bool
	}
	ring := make([]req, c.conc)
	head, inFlight := 0, 0
	for range c.conc {
		ring[(head+inFlight)%c.conc] = req{time.Now(), c.phase() == measuring}
		inFlight++
		if err := e.Send(c.size); err != nil {
			return err
		}
	}
	for inFlight > 0 {
		cs, err := e.Poll()
		if err != nil {
			return err
		}
		for _, wc := range cs {
			if wc.Err != nil {
				return fmt.Errorf("client: %w", wc.Err)
			}
			if !wc.Recv {
				continue
			}
			now := time.Now()
			if r := ring[head]; r.measured {
				l.add(now.Sub(r.t))
			}
			head = (head + 1) % c.conc
			inFlight--
			if err := e.PostRecv(wc.Buf); err != nil {
				return err
			}
			if c.phase() == stopping {
				continue
			}
			ring[(head+inFlight)%c.conc] = req{now, c.phase() == measuring}
			inFlight++
			if err := e.Send(c.size); err != nil {
				return err
			}
		}
	}
	if err := e.SendQuit(); err != nil {
		return err
	}
	// The quit message's send completion: then nothing is left posted.
	for {
		cs, err := e.Poll()
		if err != nil {
			return err
		}
		for _, wc := range cs {
			if !wc.Recv && wc.Quit {
				return wc.Err
			}
		}
	}
}
