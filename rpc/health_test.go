package rpc_test

import (
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/resolver/manual"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// Serving statuses of grpc.health.v1.HealthCheckResponse.
const (
	serving    = 1
	notServing = 2
)

// healthServer is a test's grpc.health.v1.Health with Watch only, its
// messages in their wire form (see rpc/health.go): the request a
// StringValue, the response an Int32Value.
type healthServer struct {
	mu       sync.Mutex
	status   int32
	changed  chan struct{}
	services []string // the service names Watch was asked about
	agents   []string // the user-agents the watches came with
}

func newHealthServer() *healthServer {
	return &healthServer{status: serving, changed: make(chan struct{})}
}

func (h *healthServer) set(st int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status = st
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *healthServer) watch(_ any, ss rpc.ServerStream) error {
	var req wrapperspb.StringValue
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	md, _ := metadata.FromIncomingContext(ss.Context())
	h.mu.Lock()
	h.services = append(h.services, req.Value)
	h.agents = append(h.agents, strings.Join(md.Get("user-agent"), ","))
	h.mu.Unlock()
	for {
		h.mu.Lock()
		st, ch := h.status, h.changed
		h.mu.Unlock()
		if err := ss.SendMsg(&wrapperspb.Int32Value{Value: st}); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ss.Context().Done():
			return ss.Context().Err()
		}
	}
}

// startHealthServer serves b and, when h is not nil, the health service.
func startHealthServer(t *testing.T, tr transport.Transport, b *backend, h *healthServer) string {
	srv := rpc.NewServer()
	testpb.RegisterTestServer(srv, b)
	if h != nil {
		srv.RegisterService(&rpc.ServiceDesc{
			ServiceName: "grpc.health.v1.Health",
			Streams:     []rpc.StreamDesc{{StreamName: "Watch", ServerStreams: true, Handler: h.watch}},
		}, h)
	}
	lis, err := tr.Listen("health:0")
	if err != nil {
		t.Fatal(err)
	}
	b.name = lis.Addr().String()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return b.name
}

// TestHealthChecking: with healthCheckConfig, a backend reporting
// NOT_SERVING gets no calls until it reports SERVING again; one without the
// health service is taken as serving; when none serves, calls fail with
// Unavailable.
func TestHealthChecking(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	var bs [3]backend
	hs := []*healthServer{newHealthServer(), newHealthServer(), nil}
	var st resolver.State
	for i := range bs {
		st.Addresses = append(st.Addresses, resolver.Address{Addr: startHealthServer(t, tr, &bs[i], hs[i])})
	}
	r := manual.NewBuilderWithScheme("health")
	r.InitialState(st)
	cc, c := newClient(t, tr, r, rpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":"kv"}}`))
	ctx := testCtx(t)
	for bs[0].calls.Load() == 0 || bs[1].calls.Load() == 0 || bs[2].calls.Load() == 0 {
		if _, err := echo(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for i, h := range hs[:2] {
		h.mu.Lock()
		if len(h.services) != 1 || h.services[0] != "kv" {
			t.Errorf("backend %d was asked about %q, want [kv]", i, h.services)
		}
		h.mu.Unlock()
	}

	hs[0].set(notServing)
	callUntil(t, c, 20, func(n string) bool { return n != bs[0].name })
	before := bs[0].calls.Load()
	for range 20 {
		if _, err := echo(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if n := bs[0].calls.Load() - before; n != 0 {
		t.Fatalf("a NOT_SERVING backend got %d calls", n)
	}

	hs[0].set(serving)
	for bs[0].calls.Load() == before {
		if _, err := echo(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	// Only health-checked backends now: when both stop serving, none is
	// Ready.
	if err := r.UpdateState(resolver.State{Addresses: st.Addresses[:2]}); err != nil {
		t.Fatal(err)
	}
	hs[0].set(notServing)
	hs[1].set(notServing)
	waitForState(t, cc, connectivity.TransientFailure)
	if _, err := echo(ctx, c); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not serving") {
		t.Fatalf("call with no backend serving: %v, want Unavailable saying so", err)
	}
}

// TestHealthWatchMetadata: the client's health Watch is sent as the
// user's streams are, with its user-agent (and its per-RPC credentials),
// so a server whose interceptors check them serves it.
func TestHealthWatchMetadata(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	var b backend
	h := newHealthServer()
	r := manual.NewBuilderWithScheme("health")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: startHealthServer(t, tr, &b, h)}}})
	_, c := newClient(t, tr, r, rpc.WithUserAgent("probe/1"),
		rpc.WithDefaultServiceConfig(`{"healthCheckConfig":{"serviceName":"kv"}}`))
	if _, err := echo(testCtx(t), c); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if want := "probe/1 rdmarpc-go/" + rpc.Version; len(h.agents) != 1 || h.agents[0] != want {
		t.Fatalf("the health watch came with user-agent %q, want [%q]", h.agents, want)
	}
}

// TestHealthWatchEndsWithItsLink: a backend the resolver removes is
// drained, and its open health Watch stream does not keep its connection
// open forever.
func TestHealthWatchEndsWithItsLink(t *testing.T) {
	tr := newSpy(pipe.New(pipe.Options{}))
	var bs [2]backend
	var st resolver.State
	for i := range bs {
		st.Addresses = append(st.Addresses, resolver.Address{Addr: startHealthServer(t, tr, &bs[i], newHealthServer())})
	}
	r := manual.NewBuilderWithScheme("healthdrain")
	r.InitialState(st)
	_, c := newClient(t, tr, r, rpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`))
	ctx := testCtx(t)
	for bs[0].calls.Load() == 0 || bs[1].calls.Load() == 0 {
		if _, err := echo(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	var conn transport.Conn
	for i := 0; tr.client(i) != nil; i++ {
		if sc := tr.client(i); sc.RemoteAddr().String() == bs[1].name {
			conn = sc
		}
	}
	if conn == nil {
		t.Fatalf("no connection to %s", bs[1].name)
	}
	if err := r.UpdateState(resolver.State{Addresses: st.Addresses[:1]}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.Done():
	case <-ctx.Done():
		t.Fatal("the removed backend's connection is still open")
	}
}
