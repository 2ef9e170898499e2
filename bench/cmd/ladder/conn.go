package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// connRung is a Conn ping-pong over tr: an echo server on one goroutine,
// conc callers each sending a message and waiting for a reply on the one
// connection (a reply may be another caller's: the count balances).
func connRung(tr transport.Transport, addr string) runner {
	return func(c *cell) (func() (lats, error), error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lis, err := tr.Listen(addr)
		if err != nil {
			return nil, err
		}
		acc := make(chan transport.Conn, 1)
		go func() {
			s, _ := lis.Accept(ctx)
			acc <- s
		}()
		cl, err := tr.Dial(ctx, lis.Addr().String())
		srv := <-acc
		lis.Close()
		if err != nil || srv == nil {
			if cl != nil {
				cl.Close()
			}
			if srv != nil {
				srv.Close()
			}
			return nil, fmt.Errorf("connecting: %v", err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { connEcho(srv) })
		hs := make([]*lats, c.conc)
		errs := make([]error, c.conc)
		var callers sync.WaitGroup
		for w := range c.conc {
			hs[w] = newLats()
			callers.Go(func() { errs[w] = connCall(cl, c, hs[w]) })
		}
		return func() (lats, error) {
			callers.Wait()
			cl.Close()
			srv.Close()
			wg.Wait()
			return merge(hs), errors.Join(errs...)
		}, nil
	}
}

func connEcho(c transport.Conn) {
	ctx := context.Background()
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

func connCall(c transport.Conn, cl *cell, h *lats) error {
	ctx := context.Background()
	msg := make([]byte, cl.size)
	for {
		ph := cl.phase()
		if ph == stopping {
			return nil
		}
		t0 := time.Now()
		if err := c.Send(ctx, msg); err != nil {
			return err
		}
		b, err := c.Recv(ctx)
		if err != nil {
			return err
		}
		n := b.Len()
		b.Release()
		if n != cl.size {
			return fmt.Errorf("conn: a %d-byte reply to %d bytes", n, cl.size)
		}
		if ph == measuring {
			h.add(time.Since(t0))
		}
	}
}

// tcpRung is a raw TCP ping-pong: length-prefixed messages, conc
// connections each with one message in flight (one socket with many in
// flight would need a writer apart from the reader, or the two sides'
// writes could fill both socket buffers and stall).
func tcpRung(ip string) runner {
	return func(c *cell) (func() (lats, error), error) {
		lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, err
		}
		defer lis.Close()
		var socks []net.Conn
		closeAll := func() {
			for _, s := range socks {
				s.Close()
			}
		}
		for range c.conc {
			cl, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				closeAll()
				return nil, err
			}
			srv, err := lis.Accept()
			if err != nil {
				cl.Close()
				closeAll()
				return nil, err
			}
			socks = append(socks, cl, srv)
		}
		var wg sync.WaitGroup
		hs := make([]*lats, c.conc)
		errs := make([]error, c.conc)
		for w := range c.conc {
			hs[w] = newLats()
			wg.Go(func() { tcpEcho(socks[2*w+1], c.size) })
			wg.Go(func() { errs[w] = tcpCall(socks[2*w], c, hs[w]); socks[2*w].Close() })
		}
		return func() (lats, error) {
			wg.Wait()
			closeAll()
			return merge(hs), errors.Join(errs...)
		}, nil
	}
}

// tcpEcho sends back every message until the client closes.
func tcpEcho(c net.Conn, size int) {
	buf := make([]byte, 4+size)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

func tcpCall(c net.Conn, cl *cell, h *lats) error {
	out := make([]byte, 4+cl.size)
	binary.BigEndian.PutUint32(out, uint32(cl.size))
	in := make([]byte, 4+cl.size)
	for {
		ph := cl.phase()
		if ph == stopping {
			return nil
		}
		t0 := time.Now()
		if _, err := c.Write(out); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, in); err != nil {
			return err
		}
		if ph == measuring {
			h.add(time.Since(t0))
		}
	}
}
