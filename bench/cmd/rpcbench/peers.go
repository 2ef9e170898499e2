package main

import (
	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/bench/internal/drpcecho"
	"github.com/rdmarpc/rdmarpc/bench/internal/grpcecho"
	"github.com/rdmarpc/rdmarpc/bench/internal/rawecho"
)

// peer is an implementation rdmarpc is compared with, served and called on
// loopback in this process.
type peer struct {
	impl    string // its rows' impl column
	title   string // its name in the ratio tables (then "-tcp")
	streams bool   // whether it runs the pingpong and stream modes
	client  bench.Client
	stop    func()
}

// peers are what --compare may name.
var peers = map[string]struct{ start func() (peer, error) }{
	"raw":  {startRaw},
	"drpc": {startDRPC},
	"grpc": {startGRPC},
}

func startRaw() (peer, error) {
	srv, err := rawecho.Start("127.0.0.1:0")
	if err != nil {
		return peer{}, err
	}
	c := rawecho.Dial(srv.Addr())
	return peer{impl: "raw", title: "raw", client: c, stop: func() { c.Close(); srv.Stop() }}, nil
}

func startDRPC() (peer, error) {
	srv, err := drpcecho.Start("127.0.0.1:0")
	if err != nil {
		return peer{}, err
	}
	c := drpcecho.Dial(srv.Addr())
	return peer{impl: "drpc", title: "drpc", client: c, stop: func() { c.Close(); srv.Stop() }}, nil
}

func startGRPC() (peer, error) {
	srv, err := grpcecho.Start("127.0.0.1:0")
	if err != nil {
		return peer{}, err
	}
	c, err := grpcecho.Dial(srv.Addr())
	if err != nil {
		srv.Stop()
		return peer{}, err
	}
	return peer{impl: "grpc", title: "gRPC-go", streams: true, client: c, stop: func() { c.Close(); srv.Stop() }}, nil
}
