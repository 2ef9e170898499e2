package main

import (
	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/bench/internal/drpcecho"
	"github.com/rdmarpc/rdmarpc/bench/internal/grpcecho"
	"github.com/rdmarpc/rdmarpc/bench/internal/rawecho"
)

// peerKind is an implementation rdmarpc is compared with: its server on
// loopback and its client.
type peerKind struct {
	impl    string // its rows' impl column
	title   string // its name in the ratio tables (then "-tcp")
	streams bool   // whether it runs the pingpong and stream modes
	serve   func() (addr string, stop func(), err error)
	dial    func(addr string) (bench.Client, error)
}

// peer is a peer's client, with its server in this process or in a child
// (then meter measures the server's end).
type peer struct {
	peerKind
	client bench.Client
	meter  bench.Meter // nil: the server runs in this process
	stop   func()
}

// peers are what --compare may name.
var peers = map[string]peerKind{
	"raw": {impl: "raw", title: "raw",
		serve: func() (string, func(), error) {
			srv, err := rawecho.Start("127.0.0.1:0")
			if err != nil {
				return "", nil, err
			}
			return srv.Addr(), func() { srv.Stop() }, nil
		},
		dial: func(addr string) (bench.Client, error) { return rawecho.Dial(addr), nil },
	},
	"drpc": {impl: "drpc", title: "drpc",
		serve: func() (string, func(), error) {
			srv, err := drpcecho.Start("127.0.0.1:0")
			if err != nil {
				return "", nil, err
			}
			return srv.Addr(), func() { srv.Stop() }, nil
		},
		dial: func(addr string) (bench.Client, error) { return drpcecho.Dial(addr), nil },
	},
	"grpc": {impl: "grpc", title: "gRPC-go", streams: true,
		serve: func() (string, func(), error) {
			srv, err := grpcecho.Start("127.0.0.1:0")
			if err != nil {
				return "", nil, err
			}
			return srv.Addr(), func() { srv.Stop() }, nil
		},
		dial: func(addr string) (bench.Client, error) {
			c, err := grpcecho.Dial(addr)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
	},
}

// startPeer starts k's server, in this process or in a child process
// (inProcess false), and dials it.
func startPeer(k peerKind, inProcess bool) (peer, error) {
	p := peer{peerKind: k}
	var addr string
	if inProcess {
		a, stop, err := k.serve()
		if err != nil {
			return p, err
		}
		addr, p.stop = a, stop
	} else {
		ch, err := startChild(k.impl, "", 0)
		if err != nil {
			return p, err
		}
		addr, p.meter, p.stop = ch.addr, ch, ch.stop
	}
	c, err := k.dial(addr)
	if err != nil {
		p.stop()
		return p, err
	}
	p.client = c
	srvStop := p.stop
	p.stop = func() { c.Close(); srvStop() }
	return p, nil
}
