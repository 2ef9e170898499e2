package main

import (
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startPprof serves net/http/pprof's handlers (/debug/pprof/…) on addr,
// for profiling a running server: `go tool pprof
// http://ADDR/debug/pprof/profile?seconds=10`, or /debug/pprof/allocs.
// It returns the bound address and a stop function that closes the
// listener and every connection and waits until Serve has returned.
func startPprof(addr string) (net.Addr, func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// ErrServerClosed after stop; any other error only leaves the
		// profiles unserved, which whoever asks for one sees.
		_ = hs.Serve(lis)
	}()
	return lis.Addr(), func() { hs.Close(); <-done }, nil
}
