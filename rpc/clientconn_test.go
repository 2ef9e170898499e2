package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/backoff"
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

// backend is a Test service that says who it is, counts its calls, and
// fails the next ones when told to.
type backend struct {
	testpb.UnimplementedTestServer
	name   string
	calls  atomic.Int64
	fail   atomic.Int64 // Echo fails this many calls more, with code
	code   codes.Code
	header bool // a failing Echo sends response headers first

	mu       sync.Mutex
	previous []string // each call's grpc-previous-rpc-attempts
}

func (b *backend) Echo(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	b.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	b.mu.Lock()
	b.previous = append(b.previous, strings.Join(md.Get("grpc-previous-rpc-attempts"), ","))
	b.mu.Unlock()
	if b.fail.Add(-1) >= 0 {
		if b.header {
			if err := rpc.SendHeader(ctx, metadata.Pairs("sent", "yes")); err != nil {
				return nil, err
			}
		}
		return nil, status.Error(b.code, "failing on purpose")
	}
	return &testpb.EchoResponse{Payload: []byte(b.name)}, nil
}

// backends starts n servers on tr, each its own backend.
func backends(t *testing.T, tr transport.Transport, n int) ([]*backend, []*server) {
	bs := make([]*backend, n)
	ss := make([]*server, n)
	for i := range n {
		bs[i] = &backend{}
		ss[i] = startServer(t, tr, bs[i])
		bs[i].name = ss[i].addr
	}
	return bs, ss
}

func stateOf(ss ...*server) resolver.State {
	var st resolver.State
	for _, s := range ss {
		st.Addresses = append(st.Addresses, resolver.Address{Addr: s.addr})
	}
	return st
}

// newClient makes a ClientConn over tr for a manual resolver's target.
func newClient(t *testing.T, tr transport.Transport, r *manual.Resolver, opts ...rpc.DialOption) (*rpc.ClientConn, testpb.TestClient) {
	t.Helper()
	fast := backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 100 * time.Millisecond}
	opts = append([]rpc.DialOption{rpc.WithTransport(tr), rpc.WithResolvers(r), rpc.WithConnectParams(rpc.ConnectParams{Backoff: fast})}, opts...)
	cc, err := rpc.NewClient(r.Scheme()+":///backends", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, testpb.NewTestClient(cc)
}

func echo(ctx context.Context, c testpb.TestClient, opts ...rpc.CallOption) (string, error) {
	r, err := c.Echo(ctx, &testpb.EchoRequest{}, opts...)
	return string(r.GetPayload()), err
}

// waitForState waits until cc is in state want.
func waitForState(t *testing.T, cc *rpc.ClientConn, want connectivity.State) {
	t.Helper()
	ctx := testCtx(t)
	for s := cc.GetState(); s != want; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("state %v, still waiting for %v", s, want)
		}
	}
}

// callUntil makes calls until cond holds for the backend that answered,
// n times in a row; a failed call fails the test.
func callUntil(t *testing.T, c testpb.TestClient, n int, cond func(name string) bool) {
	t.Helper()
	ctx := testCtx(t)
	for inRow := 0; inRow < n; {
		name, err := echo(ctx, c)
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		if cond(name) {
			inRow++
		} else {
			inRow = 0
		}
	}
}

const roundRobinConfig = `{"loadBalancingConfig":[{"round_robin":{}}]}`

// TestNewClientIsLazy: NewClient neither resolves nor dials; Connect does
// both, and the state goes from Idle to Ready.
func TestNewClientIsLazy(t *testing.T) {
	tr := newSpy(pipe.New(pipe.Options{}))
	_, ss := backends(t, tr, 1)
	r := manual.NewBuilderWithScheme("lazy")
	built := 0
	r.BuildCallback = func(resolver.Target, resolver.ClientConn, resolver.BuildOptions) { built++ }
	r.InitialState(stateOf(ss...))
	cc, c := newClient(t, tr, r)
	if s := cc.GetState(); s != connectivity.Idle || built != 0 || tr.dials.Load() != 0 {
		t.Fatalf("after NewClient: state %v, %d builds, %d dials; want IDLE, 0, 0", s, built, tr.dials.Load())
	}
	cc.Connect()
	waitForState(t, cc, connectivity.Ready)
	if built != 1 || tr.dials.Load() != 1 {
		t.Fatalf("after Connect: %d builds, %d dials, want 1 and 1", built, tr.dials.Load())
	}
	if _, err := echo(testCtx(t), c); err != nil {
		t.Fatal(err)
	}
	cc.Close()
	if s := cc.GetState(); s != connectivity.Shutdown {
		t.Fatalf("after Close: %v, want SHUTDOWN", s)
	}
	if _, err := echo(testCtx(t), c); status.Code(err) != codes.Canceled {
		t.Fatalf("call after Close: %v, want Canceled", err)
	}
}

// TestFirstCallConnects: a lazy client's first call connects and is served.
func TestFirstCallConnects(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	_, ss := backends(t, tr, 1)
	r := manual.NewBuilderWithScheme("first")
	r.InitialState(stateOf(ss...))
	cc, c := newClient(t, tr, r)
	if name, err := echo(testCtx(t), c); err != nil || name != ss[0].addr {
		t.Fatalf("first call: %q, %v", name, err)
	}
	if s := cc.GetState(); s != connectivity.Ready {
		t.Fatalf("after the first call: %v, want READY", s)
	}
}

// TestTransientFailure: with no server at the address, the state goes to
// TransientFailure, calls fail at once with Unavailable, and a call that
// waits for ready waits until a server comes, then is served.
func TestTransientFailure(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	r := manual.NewBuilderWithScheme("tf")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: "later"}}})
	cc, c := newClient(t, tr, r)
	cc.Connect()
	waitForState(t, cc, connectivity.TransientFailure)
	if _, err := echo(testCtx(t), c); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "later") {
		t.Fatalf("call in TRANSIENT_FAILURE: %v, want Unavailable naming the address", err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := echo(testCtx(t), c, rpc.WaitForReady(true))
		waiting <- err
	}()
	b := &backend{name: "later"}
	srv := rpc.NewServer()
	testpb.RegisterTestServer(srv, b)
	lis, err := tr.Listen("later")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()
	if err := <-waiting; err != nil {
		t.Fatalf("call waiting for ready: %v", err)
	}
}

// TestResolverError: a resolver that reports only errors leaves the
// ClientConn in TransientFailure, and calls fail with its error.
func TestResolverError(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	r := manual.NewBuilderWithScheme("reserr")
	cc, c := newClient(t, tr, r)
	cc.Connect()
	if s := cc.GetState(); s != connectivity.Connecting {
		t.Fatalf("before the resolver answers: %v, want CONNECTING", s)
	}
	r.ReportError(errors.New("no such host kv.test"))
	if s := cc.GetState(); s != connectivity.TransientFailure {
		t.Fatalf("after a resolver error: %v, want TRANSIENT_FAILURE", s)
	}
	if _, err := echo(testCtx(t), c); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no such host kv.test") {
		t.Fatalf("call: %v, want Unavailable with the resolver's error", err)
	}
	if err := r.UpdateState(resolver.State{}); err == nil {
		t.Fatal("an empty address list was accepted")
	}
}

// TestPickFirstTriesAddressesInOrder: pick_first skips an address that
// does not answer and sends every call to the first that does.
func TestPickFirstTriesAddressesInOrder(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	bs, ss := backends(t, tr, 2)
	r := manual.NewBuilderWithScheme("pf")
	st := stateOf(ss...)
	st.Addresses = append([]resolver.Address{{Addr: "nobody"}}, st.Addresses...)
	r.InitialState(st)
	_, c := newClient(t, tr, r)
	for range 10 {
		if name, err := echo(testCtx(t), c); err != nil || name != ss[0].addr {
			t.Fatalf("call: %q, %v; want %q", name, err, ss[0].addr)
		}
	}
	if n := bs[1].calls.Load(); n != 0 {
		t.Fatalf("the second backend got %d calls under pick_first", n)
	}
	// The address in use leaves the list: pick_first moves to the next.
	if err := r.UpdateState(stateOf(ss[1])); err != nil {
		t.Fatal(err)
	}
	callUntil(t, c, 10, func(n string) bool { return n == ss[1].addr })
}

// TestRoundRobin: calls go to every backend in turn, follow the resolver
// as backends join and leave, and avoid one that died.
func TestRoundRobin(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	bs, ss := backends(t, tr, 4)
	r := manual.NewBuilderWithScheme("rr")
	r.InitialState(stateOf(ss[:3]...))
	_, c := newClient(t, tr, r, rpc.WithDefaultServiceConfig(roundRobinConfig))
	// Until every backend has answered, some may still be connecting.
	ctx := testCtx(t)
	for bs[0].calls.Load() == 0 || bs[1].calls.Load() == 0 || bs[2].calls.Load() == 0 {
		if _, err := echo(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	before := []int64{bs[0].calls.Load(), bs[1].calls.Load(), bs[2].calls.Load()}
	for range 30 {
		if _, err := echo(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if d := bs[i].calls.Load() - before[i]; d != 10 {
			t.Fatalf("backend %d got %d of 30 calls with three Ready backends, want 10", i, d)
		}
	}

	// Scale: the fourth joins, the first leaves.
	if err := r.UpdateState(stateOf(ss[1:]...)); err != nil {
		t.Fatal(err)
	}
	gone := bs[0].calls.Load()
	for bs[3].calls.Load() == 0 {
		if _, err := echo(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if n := bs[0].calls.Load(); n != gone {
		t.Fatalf("the backend the resolver removed got %d more calls", n-gone)
	}

	// The second dies: calls go to the others; none fails, as none had
	// left when it died.
	ss[1].srv.Stop()
	callUntil(t, c, 20, func(n string) bool { return n != ss[1].addr })
}

// TestServiceConfigErrors: a config the client cannot follow is refused
// when the ClientConn is made, saying why.
func TestServiceConfigErrors(t *testing.T) {
	for _, tc := range []struct{ config, want string }{
		{`{"loadBalancingConfig":[{"grpclb":{}}]}`, `no supported policy in loadBalancingConfig ["grpclb"]`},
		{`{"loadBalancingPolicy":"weighted"}`, `unknown loadBalancingPolicy "weighted"`},
		{`{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":1}}]}`, "maxAttempts 1"},
		{`{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`, `initialBackoff "1"`},
		{`{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["NOT_A_CODE"]}}]}`, `unknown status code "NOT_A_CODE"`},
		{`{"retryThrottling":{"maxTokens":0,"tokenRatio":1}}`, "retryThrottling"},
		{`{"loadBalancingConfig":`, "service config"},
	} {
		_, err := rpc.NewClient("passthrough:///x:1", rpc.WithDefaultServiceConfig(tc.config))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %s: %v, want InvalidArgument saying %q", tc.config, err, tc.want)
		}
	}
	cc, err := rpc.NewClient("passthrough:///x:1", rpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"grpclb":{}},{"round_robin":{}}],"unknownField":1}`))
	if err != nil {
		t.Fatalf("a list whose second policy is round_robin: %v", err)
	}
	cc.Close()
}

// TestTargetErrors: a target with an unknown scheme is refused, naming the
// scheme and what is registered.
func TestTargetErrors(t *testing.T) {
	_, err := rpc.NewClient("foo://kv:7070")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"foo"`) || !strings.Contains(err.Error(), "registered resolvers: dns,") {
		t.Fatalf("unknown scheme: %v", err)
	}
	_, err = rpc.Dial(testCtx(t), "foo+dns:///kv:7070")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"foo"`) {
		t.Fatalf("unknown transport: %v", err)
	}
	// A host the resolver cannot take: Dial says so; a lazy client's
	// calls fail with it.
	_, err = rpc.Dial(testCtx(t), "dns:///bad host:7070")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "bad host") {
		t.Fatalf("Dial with a malformed host: %v, want InvalidArgument naming it", err)
	}
	cc, err := rpc.NewClient("dns:///bad host:7070")
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	err = cc.Invoke(testCtx(t), "/s/m", &testpb.EchoRequest{}, &testpb.EchoResponse{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "bad host") {
		t.Fatalf("call with a malformed host: %v, want Unavailable naming it", err)
	}
}

// TestRoundRobinDuplicateAddresses: an address listed twice gets one
// connection, also when it was already in use.
func TestRoundRobinDuplicateAddresses(t *testing.T) {
	tr := newSpy(pipe.New(pipe.Options{}))
	bs, ss := backends(t, tr, 2)
	r := manual.NewBuilderWithScheme("dup")
	r.InitialState(stateOf(ss[0], ss[0]))
	_, c := newClient(t, tr, r, rpc.WithDefaultServiceConfig(roundRobinConfig))
	callUntil(t, c, 5, func(n string) bool { return n == ss[0].addr })
	if err := r.UpdateState(stateOf(ss[0], ss[1], ss[0], ss[1])); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for bs[1].calls.Load() == 0 {
		if _, err := echo(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if n := tr.dials.Load(); n != 2 {
		t.Fatalf("%d dials for two distinct addresses", n)
	}
}

// gatedDialer holds every dial until its gate is closed.
type gatedDialer struct {
	transport.Transport
	gate chan struct{}
}

func (g gatedDialer) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Transport.Dial(ctx, addr)
}

// TestStatesAfterLinkLoss: pick_first's backend goes Idle when its
// connection is lost, the resolver is asked to look again, and the next
// call makes it Connecting, then Ready.
func TestStatesAfterLinkLoss(t *testing.T) {
	spy := newSpy(pipe.New(pipe.Options{}))
	_, ss := backends(t, spy, 1)
	gate := make(chan struct{})
	close(gate)
	tr := &gatedDialer{Transport: spy, gate: gate}
	r := manual.NewBuilderWithScheme("loss")
	r.InitialState(stateOf(ss...))
	cc, c := newClient(t, tr, r)
	if _, err := echo(testCtx(t), c); err != nil {
		t.Fatal(err)
	}
	tr.gate = make(chan struct{}) // the next dial waits
	spy.client(0).Close()
	waitForState(t, cc, connectivity.Idle)
	if n := r.ResolveNowCount(); n != 1 {
		t.Fatalf("the resolver was asked to resolve again %d times after a lost connection, want 1", n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := echo(testCtx(t), c)
		done <- err
	}()
	waitForState(t, cc, connectivity.Connecting)
	close(tr.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := cc.GetState(); s != connectivity.Ready {
		t.Fatalf("after the call: %v, want READY", s)
	}
}

// TestAutoWithoutRDMA: an auto+ target in a program that has no RDMA
// transport (this test binary) dials TCP.
func TestAutoWithoutRDMA(t *testing.T) {
	_, _, _, port := tcpBackends(t, 1)
	cc, err := rpc.Dial(testCtx(t), fmt.Sprintf("auto://127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if name, err := echo(testCtx(t), testpb.NewTestClient(cc)); err != nil || name != "127.0.0.1" {
		t.Fatalf("call: %q, %v", name, err)
	}
}

// TestPickFirstHappyEyeballs: with addresses that accept and never answer
// ahead of one that works, pick_first connects to the working one about
// 250 ms per address later, not a connect timeout (20 s) per address: the
// attempts start one after another and run side by side (gRFC A61). The
// attempts that lost are abandoned and their connections closed. (Issue
// 20 item 5: 3 such addresses delayed the first call 30 s.)
func TestPickFirstHappyEyeballs(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	_, ss := backends(t, tr, 1)
	var silent []string
	accepted := make(chan transport.Conn, 8)
	for range 3 {
		lis, err := tr.Listen("silent:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lis.Close() })
		silent = append(silent, lis.Addr().String())
		go func() {
			for {
				c, err := lis.Accept(context.Background())
				if err != nil {
					return
				}
				accepted <- c // says nothing: no SETTINGS
			}
		}()
	}
	r := manual.NewBuilderWithScheme("he")
	var st resolver.State
	for _, a := range silent {
		st.Addresses = append(st.Addresses, resolver.Address{Addr: a})
	}
	st.Addresses = append(st.Addresses, resolver.Address{Addr: ss[0].addr})
	r.InitialState(st)
	_, c := newClient(t, tr, r)
	// One call: the connect timeout per address would take it past the
	// test's own deadline (30 s) three times over.
	if name, err := echo(testCtx(t), c); err != nil || name != ss[0].addr {
		t.Fatalf("call: %q, %v; want %q", name, err, ss[0].addr)
	}
	for range silent {
		conn := <-accepted
		select {
		case <-conn.Done():
		case <-testCtx(t).Done():
			t.Fatal("an attempt that lost keeps its connection")
		}
	}
}
