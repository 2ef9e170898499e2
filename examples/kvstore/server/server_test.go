package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const timeout = 30 * time.Second // bounds waits that should end promptly

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// fakeRDMA stands in for the RDMA transport: it fails to listen with
// listenErr, or listens over TCP, and keeps counters.
type fakeRDMA struct {
	listenErr error
	tcp       transport.Transport
}

func (f *fakeRDMA) Listen(addr string) (transport.Listener, error) {
	if f.listenErr != nil {
		return nil, f.listenErr
	}
	return f.tcp.Listen(addr)
}

func (f *fakeRDMA) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	return f.tcp.Dial(ctx, addr)
}

func (f *fakeRDMA) Counters() map[string]uint64 {
	return map[string]uint64{"credit_waits": 7, "recvs_posted": 42, "odd-name": 1}
}

// run starts a server from cfg (in memory unless cfg says otherwise) and
// serves it until the test ends, or until the returned cancel is called;
// wait then returns Serve's result.
type running struct {
	srv    *Server
	cancel context.CancelFunc
	served chan error
}

func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.served:
		r.served <- err // for the cleanup
		return err
	case <-time.After(timeout):
		t.Fatal("Serve did not return")
		return nil
	}
}

func start(t *testing.T, cfg Config) *running {
	t.Helper()
	if cfg.Store.Dir == "" {
		cfg.Store.InMemory = true
	}
	if cfg.Transports == nil {
		cfg.Transports = map[string]transport.Transport{}
	}
	if _, ok := cfg.Transports["tcp"]; !ok {
		cfg.Transports["tcp"] = tcp.New(tcp.Options{})
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, cancel: cancel, served: make(chan error, 1)}
	go func() { r.served <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		srv.Stop()
		if err := r.wait(t); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return r
}

func dial(t *testing.T, target string) kvpb.KVClient {
	t.Helper()
	scheme, addr, _ := transport.ParseTarget(target)
	if scheme != "tcp" { // fakeRDMA listens over TCP
		target = "tcp://" + addr
	}
	cc, err := rpc.Dial(testCtx(t), target, rpc.WithTransport(tcp.New(tcp.Options{})))
	if err != nil {
		t.Fatalf("Dial(%s): %v", target, err)
	}
	t.Cleanup(func() { cc.Close() })
	return kvpb.NewKVClient(cc)
}

func TestListen(t *testing.T) {
	noDevice := fmt.Errorf("rdma: no RDMA device has 127.0.0.1: %w", transport.ErrNoDevice)
	tests := []struct {
		name         string
		listen       string
		rdma         transport.Transport // nil: no rdma transport at all
		wantScheme   string
		wantFallback string // "" when no fallback line is wanted
	}{
		{"tcp", "tcp://127.0.0.1:0", nil, "tcp", ""},
		{"auto without an RDMA transport", "auto://127.0.0.1:0", nil, "tcp", "this build has no RDMA transport"},
		{"auto without a device", "auto://127.0.0.1:0", &fakeRDMA{listenErr: noDevice}, "tcp", "no RDMA device has 127.0.0.1"},
		{"auto with a device", "auto://127.0.0.1:0", &fakeRDMA{tcp: tcp.New(tcp.Options{})}, "rdma", ""},
		{"rdma with a device", "rdma://127.0.0.1:0", &fakeRDMA{tcp: tcp.New(tcp.Options{})}, "rdma", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			cfg := Config{Listen: []string{tc.listen}, Logger: zap.New(core), Transports: map[string]transport.Transport{}}
			if tc.rdma != nil {
				cfg.Transports["rdma"] = tc.rdma
			}
			r := start(t, cfg)
			targets := r.srv.Targets()
			if len(targets) != 1 || !strings.HasPrefix(targets[0], tc.wantScheme+"://127.0.0.1:") || strings.HasSuffix(targets[0], ":0") {
				t.Fatalf("Targets() = %v, want one %s:// target with its port", targets, tc.wantScheme)
			}
			fallbacks := logs.FilterMessageSnippet("serving TCP instead").All()
			switch {
			case tc.wantFallback == "" && len(fallbacks) != 0:
				t.Fatalf("unexpected fallback log: %v", fallbacks[0].ContextMap())
			case tc.wantFallback != "" && len(fallbacks) != 1:
				t.Fatalf("%d fallback log lines, want 1", len(fallbacks))
			case tc.wantFallback != "":
				if reason := fmt.Sprint(fallbacks[0].ContextMap()["reason"]); !strings.Contains(reason, tc.wantFallback) {
					t.Fatalf("fallback reason %q, want it to say %q", reason, tc.wantFallback)
				}
			}
			kv := dial(t, targets[0])
			if _, err := kv.Put(testCtx(t), &kvpb.PutRequest{Key: []byte("k")}); err != nil {
				t.Fatalf("Put: %v", err)
			}
		})
	}
}

// TestNewFails: a server that cannot start says why, and releases all it
// took: the store and the listeners it had opened.
func TestNewFails(t *testing.T) {
	tests := []struct {
		name   string
		listen []string
		rdma   transport.Transport
		want   string
	}{
		{"rdma without a transport", []string{"rdma://127.0.0.1:0"}, nil, `no transport for scheme "rdma"`},
		{"rdma without a device", []string{"rdma://127.0.0.1:0"}, &fakeRDMA{listenErr: fmt.Errorf("none: %w", transport.ErrNoDevice)}, "no device serves"},
		{"auto with another RDMA failure", []string{"auto://127.0.0.1:0"}, &fakeRDMA{listenErr: errors.New("address already in use")}, "address already in use"},
		{"a bad target", []string{"tcp://127.0.0.1:0", "nonsense://"}, nil, "bad target"},
		{"nothing to listen on", nil, nil, "nothing to listen on"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{Listen: tc.listen, Store: store.Options{Dir: dir},
				Transports: map[string]transport.Transport{"tcp": tcp.New(tcp.Options{})}}
			if tc.rdma != nil {
				cfg.Transports["rdma"] = tc.rdma
			}
			if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error saying %q", err, tc.want)
			}
			assertReopens(t, dir)
		})
	}
	// The metrics address is taken after the store and the listeners.
	dir := t.TempDir()
	_, err := New(Config{Listen: []string{"tcp://127.0.0.1:0"}, Store: store.Options{Dir: dir}, MetricsAddr: "256.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("New with a bad metrics address: %v", err)
	}
	assertReopens(t, dir)
}

// assertReopens fails unless the store in dir is closed (it can be opened).
func assertReopens(t *testing.T, dir string) {
	t.Helper()
	s, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatalf("the store was left open: %v", err)
	}
	s.Close()
}

// TestNoMetricsNoCounting: without MetricsAddr no stats handler runs on
// the call path, so nothing counts calls (the handlers cost a Get about a
// tenth of the server's CPU).
func TestNoMetricsNoCounting(t *testing.T) {
	r := start(t, Config{Listen: []string{"tcp://127.0.0.1:0"}})
	kv := dial(t, r.srv.Targets()[0])
	ctx := testCtx(t)
	if _, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, &kvpb.GetRequest{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	fams, err := r.srv.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "grpc_server_") && len(f.GetMetric()) > 0 {
			t.Errorf("%s counted calls although no one can read it", f.GetName())
		}
	}
}

func TestMetrics(t *testing.T) {
	r := start(t, Config{
		Listen:      []string{"auto://127.0.0.1:0"},
		Transports:  map[string]transport.Transport{"rdma": &fakeRDMA{tcp: tcp.New(tcp.Options{})}},
		MetricsAddr: "127.0.0.1:0",
	})
	kv := dial(t, r.srv.Targets()[0])
	ctx := testCtx(t)
	for range 3 {
		if _, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Get(ctx, &kvpb.GetRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Get with an empty key: %v", err)
	}
	_, err := kv.CompareAndSwap(ctx, &kvpb.CompareAndSwapRequest{Key: []byte("k"), Value: []byte("w")})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("CAS conflict: %v", err)
	}

	scrape := func() string {
		resp, err := http.Get("http://" + r.srv.MetricsAddr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(body)
	}
	target := r.srv.Targets()[0]
	wants := []string{
		`grpc_server_started_total{grpc_method="Put",grpc_service="rdmarpc.kvstore.v1.KV",grpc_type="unary"} 3`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Put",grpc_service="rdmarpc.kvstore.v1.KV",grpc_type="unary"} 3`,
		`grpc_server_handled_total{grpc_code="InvalidArgument",grpc_method="Get",grpc_service="rdmarpc.kvstore.v1.KV",grpc_type="unary"} 1`,
		`grpc_server_handled_total{grpc_code="Aborted",grpc_method="CompareAndSwap",grpc_service="rdmarpc.kvstore.v1.KV",grpc_type="unary"} 1`,
		`grpc_server_msg_received_total{grpc_method="Put",grpc_service="rdmarpc.kvstore.v1.KV",grpc_type="unary"} 3`,
		`grpc_server_msg_sent_total{grpc_method="Put",grpc_service="rdmarpc.kvstore.v1.KV",grpc_type="unary"} 3`,
		`grpc_server_handling_seconds_count{grpc_method="Put",grpc_service="rdmarpc.kvstore.v1.KV",grpc_type="unary"} 3`,
		`grpc_server_handling_seconds_bucket{grpc_method="Put",grpc_service="rdmarpc.kvstore.v1.KV",grpc_type="unary",le="+Inf"} 3`,
		`kvstore_listener_info{scheme="rdma",target="` + target + `"} 1`,
		`kvstore_store_writable 1`,
		`rdmarpc_transport_credit_waits_total{scheme="rdma"} 7`,
		`rdmarpc_transport_recvs_posted_total{scheme="rdma"} 42`,
		`rdmarpc_transport_odd_name_total{scheme="rdma"} 1`,
		`go_goroutines`,
	}
	missing := func(body string) []string {
		var out []string
		for _, want := range wants {
			if !strings.Contains(body, want) {
				out = append(out, want)
			}
		}
		return out
	}
	// The server counts a call handled once its response has left (the
	// stats End, as gRPC-go's): the client may see the response first.
	body := scrape()
	for end := time.Now().Add(timeout); len(missing(body)) > 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
		body = scrape()
	}
	for _, want := range missing(body) {
		t.Errorf("metrics lack %s", want)
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}

// blocker is an interceptor that holds Put calls until released.
type blocker struct {
	entered  chan struct{} // a Put is being held
	release  chan struct{}
	canceled chan struct{} // the held call's context ended first
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 1), release: make(chan struct{}), canceled: make(chan struct{}, 1)}
}

func (b *blocker) intercept(ctx context.Context, req any, info *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
	if info.FullMethod == kvpb.KV_Put_FullMethodName {
		b.entered <- struct{}{}
		select {
		case <-b.release:
		case <-ctx.Done():
			b.canceled <- struct{}{}
			return nil, ctx.Err()
		}
	}
	return h(ctx, req)
}

// onLog returns a logger that closes the returned channel when a message
// containing msg is logged.
func onLog(msg string) (*zap.Logger, <-chan struct{}) {
	seen := make(chan struct{})
	var once sync.Once
	core, _ := observer.New(zap.DebugLevel)
	log := zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
		if strings.Contains(e.Message, msg) {
			once.Do(func() { close(seen) })
		}
		return nil
	}))
	return log, seen
}

// TestGracefulShutdown: once shutdown starts, new connections are refused,
// the call in progress finishes and its write is in the store, which is
// then closed.
func TestGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	b := newBlocker()
	inner, err := tcp.New(tcp.Options{}).Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &notifyingListener{Listener: inner, closed: make(chan struct{})}
	r := start(t, Config{
		Listeners:  []transport.Listener{lis},
		Store:      store.Options{Dir: dir},
		RPCOptions: []rpc.ServerOption{rpc.UnaryInterceptor(b.intercept)},
	})
	target := "tcp://" + lis.Addr().String()
	kv := dial(t, target)
	putErr := make(chan error, 1)
	go func() {
		_, err := kv.Put(testCtx(t), &kvpb.PutRequest{Key: []byte("in-flight"), Value: []byte("done")})
		putErr <- err
	}()
	<-b.entered
	r.cancel()
	<-lis.closed
	// The listener is closed: a new client cannot connect.
	if cc, err := rpc.Dial(testCtx(t), target); err == nil {
		cc.Close()
		t.Fatal("a new connection was accepted while draining")
	}
	close(b.release)
	if err := <-putErr; err != nil {
		t.Fatalf("the call in progress during shutdown: %v", err)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	s, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatalf("the store is not closed after Serve: %v", err)
	}
	defer s.Close()
	if v, ok, _ := s.Get([]byte("in-flight")); !ok || string(v) != "done" {
		t.Fatal("the drained call's write is missing")
	}
}

// TestShutdownCutShort: calls that outlive the shutdown timeout, or a Stop,
// are canceled and Serve returns.
func TestShutdownCutShort(t *testing.T) {
	for _, how := range []string{"timeout", "Stop"} {
		t.Run(how, func(t *testing.T) {
			b := newBlocker()
			log, draining := onLog("draining calls")
			cfg := Config{
				Listen:          []string{"tcp://127.0.0.1:0"},
				Logger:          log,
				ShutdownTimeout: time.Hour,
				RPCOptions:      []rpc.ServerOption{rpc.UnaryInterceptor(b.intercept)},
			}
			if how == "timeout" {
				cfg.ShutdownTimeout = time.Millisecond
			}
			r := start(t, cfg)
			kv := dial(t, r.srv.Targets()[0])
			putErr := make(chan error, 1)
			go func() {
				_, err := kv.Put(testCtx(t), &kvpb.PutRequest{Key: []byte("k")})
				putErr <- err
			}()
			<-b.entered
			r.cancel()
			<-draining
			if how == "Stop" {
				r.srv.Stop()
			}
			<-b.canceled
			if err := <-putErr; status.Code(err) != codes.Unavailable {
				t.Fatalf("the call cut short: %v, want Unavailable", err)
			}
			if err := r.wait(t); err != nil {
				t.Fatalf("Serve: %v", err)
			}
		})
	}
}

// TestServeListenerFails: a listener that fails ends Serve with its error,
// after the same orderly shutdown.
func TestServeListenerFails(t *testing.T) {
	lis := &failingListener{err: errors.New("the NIC caught fire"), addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}
	srv, err := New(Config{Listeners: []transport.Listener{lis}, Store: store.Options{InMemory: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(context.Background()); err == nil || !strings.Contains(err.Error(), "caught fire") {
		t.Fatalf("Serve: %v, want the listener's error", err)
	}
}

type failingListener struct {
	err  error
	addr net.Addr
}

func (l *failingListener) Accept(context.Context) (transport.Conn, error) { return nil, l.err }
func (l *failingListener) Close() error                                   { return nil }
func (l *failingListener) Addr() net.Addr                                 { return l.addr }

// notifyingListener closes closed once it is closed: after the inner
// listener's Close has returned, so the socket no longer accepts.
type notifyingListener struct {
	transport.Listener
	once   sync.Once
	closed chan struct{}
}

func (l *notifyingListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}
