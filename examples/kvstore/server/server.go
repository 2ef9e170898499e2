package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvservice"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/reflection"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Config describes a server. Listen or Listeners must name at least one
// listener; the rest has usable zero values.
type Config struct {
	// Listen lists targets to listen on (see the package documentation).
	Listen []string
	// Listeners are served as well, as they are (tests hand in listeners
	// of the transport under test).
	Listeners []transport.Listener
	// Transports serve schemes instead of the transport registry (a TCP
	// transport with TLS, for instance, or a fake in tests).
	Transports map[string]transport.Transport

	// Store configures the storage: data directory, in memory, sync policy.
	Store store.Options

	// MetricsAddr, when set, serves Prometheus metrics at
	// http://MetricsAddr/metrics. Unset, calls are not counted at all: the
	// RPC stats handlers cost about a tenth of a Get's server CPU and ten
	// allocations, for figures no one could read.
	MetricsAddr string
	// ShutdownTimeout bounds how long Serve lets calls drain once its
	// context is done before it closes every connection. Default 10 s.
	ShutdownTimeout time.Duration
	// RPCOptions are added to the rpc server's (after the server's own
	// interceptor).
	RPCOptions []rpc.ServerOption
	// Logger is used by the server, the rpc server and the store. Default
	// zap.NewNop().
	Logger *zap.Logger
}

// Server is a running key-value store: New opens the store and the
// listeners, Serve serves until its context is done and then closes all.
type Server struct {
	cfg       Config
	log       *zap.Logger
	st        *store.Store
	rpc       *rpc.Server
	kv        *kvservice.Service
	health    *health.Server // KV SERVING until the shutdown starts
	metrics   *metrics
	listeners []transport.Listener
	targets   []string
	httpLis   net.Listener
	http      *http.Server

	stopOnce sync.Once
	stopNow  chan struct{} // closed by Stop
}

// New opens the store and every listener, and takes ownership of
// Config.Listeners. When anything fails it closes all of them and returns
// the error. Nothing is served until Serve, which must then be called: it
// is what closes everything in the end.
func New(cfg Config) (_ *Server, err error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if len(cfg.Listen) == 0 && len(cfg.Listeners) == 0 {
		return nil, errors.New("server: nothing to listen on")
	}
	s := &Server{cfg: cfg, log: cfg.Logger.Named("kvserver"), metrics: newMetrics(), stopNow: make(chan struct{})}
	for _, lis := range cfg.Listeners {
		s.add(lis, "", nil)
	}
	defer func() {
		if err != nil {
			s.closeAll()
		}
	}()

	so := cfg.Store
	so.Logger = cfg.Logger
	if s.st, err = store.Open(so); err != nil {
		return nil, err
	}
	s.metrics.storeWritable(s.st)
	for _, target := range cfg.Listen {
		lis, actual, t, err := s.listen(target)
		if err != nil {
			return nil, err
		}
		s.add(lis, actual, t)
	}
	if cfg.MetricsAddr != "" {
		if s.httpLis, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{Registry: s.metrics.reg}))
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}

	opts := []rpc.ServerOption{rpc.Logger(cfg.Logger)}
	if s.http != nil {
		opts = append(opts, rpc.StatsHandler(s.metrics.rpc), rpc.StatsHandler(s.metrics.transports))
	}
	opts = append(opts, cfg.RPCOptions...)
	s.rpc = rpc.NewServer(opts...)
	s.kv = kvservice.New(s.st)
	kvpb.RegisterKVServer(s.rpc, s.kv)
	s.health = health.NewServer()
	s.health.SetServingStatus(kvpb.KV_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s.rpc, s.health)
	reflection.Register(s.rpc)
	return s, nil
}

func (s *Server) add(lis transport.Listener, target string, t transport.Transport) {
	scheme := "unknown"
	if target == "" {
		target = lis.Addr().String()
	} else {
		scheme, _, _ = strings.Cut(target, "://")
	}
	s.listeners = append(s.listeners, lis)
	s.targets = append(s.targets, target)
	s.metrics.listening(target, scheme, t)
}

// transport returns the transport serving scheme.
func (s *Server) transport(scheme string) (transport.Transport, bool) {
	if t, ok := s.cfg.Transports[scheme]; ok {
		return t, true
	}
	return transport.Lookup(scheme)
}

// listen listens on target; it returns the target actually listened on
// (auto:// resolved, port 0 replaced) and its transport.
func (s *Server) listen(target string) (transport.Listener, string, transport.Transport, error) {
	scheme, addr, err := transport.ParseTarget(target)
	if err != nil {
		return nil, "", nil, err
	}
	if scheme == "auto" {
		t, ok := s.transport("rdma")
		reason := "this build has no RDMA transport"
		if ok {
			lis, err := t.Listen(addr)
			if err == nil {
				return lis, "rdma://" + lis.Addr().String(), t, nil
			}
			if !errors.Is(err, transport.ErrNoDevice) {
				return nil, "", nil, fmt.Errorf("listening on %s: %w", target, err)
			}
			reason = err.Error()
		}
		s.log.Info("no RDMA device serves this address: serving TCP instead",
			zap.String("target", target), zap.String("reason", reason))
		scheme = "tcp"
	}
	t, ok := s.transport(scheme)
	if !ok {
		_, _, err := transport.ForTarget(scheme + "://" + addr) // for its message
		return nil, "", nil, err
	}
	lis, err := t.Listen(addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("listening on %s://%s: %w", scheme, addr, err)
	}
	return lis, scheme + "://" + lis.Addr().String(), t, nil
}

// Targets returns the targets served, as clients dial them
// ("tcp://127.0.0.1:7070"): auto:// resolved and ports chosen. Listeners
// handed in by Config.Listeners show as their address alone.
func (s *Server) Targets() []string { return s.targets }

// MetricsAddr returns the address of the metrics endpoint, or nil.
func (s *Server) MetricsAddr() net.Addr {
	if s.httpLis == nil {
		return nil
	}
	return s.httpLis.Addr()
}

// Serve serves until ctx is done or a listener fails, then shuts down: it
// stops taking connections, lets calls in progress finish for up to
// Config.ShutdownTimeout (or until Stop), closes the remaining connections,
// the metrics endpoint and the store. It returns nil after a shutdown asked
// for by ctx, else the listener's error. Serve may be called once.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, len(s.listeners)+1)
	var wg sync.WaitGroup
	for _, lis := range s.listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- s.rpc.Serve(lis)
		}()
	}
	if s.http != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.http.Serve(s.httpLis); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics: %w", err)
			}
		}()
	}
	fields := []zap.Field{zap.Strings("targets", s.targets)}
	if a := s.MetricsAddr(); a != nil {
		fields = append(fields, zap.String("metrics", "http://"+a.String()+"/metrics"))
	}
	s.log.Info("kvserver ready", fields...)

	var failure error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down: draining calls", zap.Duration("timeout", s.cfg.ShutdownTimeout))
	case failure = <-errc:
		s.log.Error("shutting down after a failure", zap.Error(failure))
	case <-s.stopNow:
		s.log.Info("shutting down now")
	}
	s.drain()
	if s.http != nil {
		s.http.Close()
	}
	wg.Wait()
	return errors.Join(failure, s.closeStore())
}

// Stop cuts a shutdown short: connections close without waiting for their
// calls. Safe to call at any time, and more than once.
func (s *Server) Stop() { s.stopOnce.Do(func() { close(s.stopNow) }) }

// drain stops the rpc server gracefully within the shutdown timeout.
func (s *Server) drain() {
	s.health.Shutdown() // health checkers see NOT_SERVING while calls drain
	s.kv.Shutdown()     // watches never end by themselves
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.rpc.GracefulStop()
	}()
	timer := time.NewTimer(s.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
		s.log.Warn("calls still running after the shutdown timeout: closing their connections")
	case <-s.stopNow:
	}
	s.rpc.Stop()
	<-done
}

func (s *Server) closeStore() error {
	if err := s.st.Close(); err != nil {
		return fmt.Errorf("closing the store: %w", err)
	}
	s.log.Info("store closed")
	return nil
}

// closeAll undoes a New that failed half way.
func (s *Server) closeAll() {
	for _, lis := range s.listeners {
		lis.Close()
	}
	if s.httpLis != nil {
		s.httpLis.Close()
	}
	if s.st != nil {
		s.st.Close()
	}
}
