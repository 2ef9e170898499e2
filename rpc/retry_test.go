package rpc_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/resolver/manual"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

func retryConfig(attempts int, throttle string) string {
	return fmt.Sprintf(`{"methodConfig":[{"name":[{"service":"rdmarpc.test.v1.Test","method":"Echo"}],
		"retryPolicy":{"maxAttempts":%d,"initialBackoff":"0.001s","maxBackoff":"0.002s","backoffMultiplier":2,
		"retryableStatusCodes":["UNAVAILABLE","RESOURCE_EXHAUSTED"]}}]%s}`, attempts, throttle)
}

func retryClient(t *testing.T, b *backend, config string) (string, func() ([]string, error)) {
	tr := pipe.New(pipe.Options{})
	s := startServer(t, tr, b)
	b.name = s.addr
	r := manual.NewBuilderWithScheme("retry")
	r.InitialState(stateOf(s))
	_, c := newClient(t, tr, r, rpc.WithDefaultServiceConfig(config))
	return s.addr, func() ([]string, error) {
		b.mu.Lock()
		b.previous = nil
		b.mu.Unlock()
		_, err := echo(testCtx(t), c)
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.previous, err
	}
}

// TestRetryPolicy: a call failing with a retryable code is made again, up
// to maxAttempts, each attempt saying how many went before; other codes,
// and a call whose response headers arrived, are not retried.
func TestRetryPolicy(t *testing.T) {
	b := &backend{code: codes.Unavailable}
	_, call := retryClient(t, b, retryConfig(3, ""))
	if got := strings.Join(func() []string { v, _ := call(); return v }(), "|"); got != "" {
		t.Fatalf("a call that succeeds: attempts %q, want one without the header", got)
	}

	b.fail.Store(2)
	attempts, err := call()
	if err != nil || strings.Join(attempts, "|") != "|1|2" {
		t.Fatalf("two failures then success: %v, attempts' previous counts %q, want nil and \"|1|2\"", err, attempts)
	}

	b.fail.Store(5)
	attempts, err = call()
	if status.Code(err) != codes.Unavailable || len(attempts) != 3 {
		t.Fatalf("failing every time: %v after %d attempts, want Unavailable after 3", err, len(attempts))
	}

	b.fail.Store(1)
	b.code = codes.Internal
	attempts, err = call()
	if status.Code(err) != codes.Internal || len(attempts) != 1 {
		t.Fatalf("a code not retryable: %v after %d attempts, want Internal after 1", err, len(attempts))
	}

	b.fail.Store(1)
	b.code, b.header = codes.Unavailable, true
	attempts, err = call()
	if status.Code(err) != codes.Unavailable || len(attempts) != 1 {
		t.Fatalf("failing after sending headers: %v after %d attempts, want Unavailable after 1 (committed)", err, len(attempts))
	}
}

// TestRetryThrottle: gRPC's token bucket. With 10 tokens, each failed
// attempt takes one and retries stop at half: the first failing call makes
// 5 attempts (10 → 5 tokens), the next ones 1 each; successes (0.5 a
// call) let retries go again once the bucket is above half.
func TestRetryThrottle(t *testing.T) {
	b := &backend{code: codes.Unavailable}
	_, call := retryClient(t, b, retryConfig(5, `,"retryThrottling":{"maxTokens":10,"tokenRatio":0.5}`))
	b.fail.Store(1000)
	for i, want := range []int{5, 1, 1} {
		attempts, err := call()
		if status.Code(err) != codes.Unavailable || len(attempts) != want {
			t.Fatalf("failing call %d: %v after %d attempts, want Unavailable after %d", i, err, len(attempts), want)
		}
	}
	// 10 - 5 - 1 - 1 = 3 tokens. Eight successes bring 4 more: 7.
	b.fail.Store(0)
	for range 8 {
		if _, err := call(); err != nil {
			t.Fatal(err)
		}
	}
	b.fail.Store(1000)
	if attempts, _ := call(); len(attempts) != 2 {
		t.Fatalf("failing call with 7 tokens: %d attempts, want 2 (7 → 6 retries, 6 → 5 stops)", len(attempts))
	}
}

// TestMethodConfig: a method's timeout bounds its calls and streams, and
// its waitForReady is the default the call option overrides.
func TestMethodConfig(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	g := newGate()
	s := startServer(t, tr, g)
	hname := startHealthServer(t, tr, &backend{}, newHealthServer())
	config := `{"methodConfig":[
		{"name":[{"service":"rdmarpc.test.v1.Test","method":"Block"},{"service":"grpc.health.v1.Health"}],"timeout":"0.02s"},
		{"name":[{"service":"rdmarpc.test.v1.Test","method":"Echo"}],"waitForReady":true}]}`
	r := manual.NewBuilderWithScheme("mc")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: s.addr}}})
	cc, c := newClient(t, tr, r, rpc.WithDefaultServiceConfig(config))
	if _, err := c.Block(testCtx(t), &testpb.BlockRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Block with the method's timeout: %v, want DeadlineExceeded", err)
	}
	if err := r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: hname}}}); err != nil {
		t.Fatal(err)
	}
	// Calls go to the first server until the balancer has moved to the
	// health server (it answers Echo with its name; the first, with none).
	for ctx := testCtx(t); ; {
		name, err := echo(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if name == hname {
			break
		}
	}
	cs, err := cc.NewStream(testCtx(t), &rpc.StreamDesc{ServerStreams: true}, "/grpc.health.v1.Health/Watch", rpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&wrapperspb.StringValue{}); err != nil {
		t.Fatal(err)
	}
	for err == nil {
		err = cs.RecvMsg(new(wrapperspb.Int32Value))
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("stream with the method's timeout: %v, want DeadlineExceeded", err)
	}

	// No server: Echo waits for ready by default, until its own deadline.
	if err := r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: "nobody"}}}); err != nil {
		t.Fatal(err)
	}
	waitForState(t, cc, connectivity.TransientFailure)
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Millisecond)
	defer cancel()
	if _, err := echo(ctx, c); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Echo with waitForReady from the config: %v, want DeadlineExceeded", err)
	}
	if _, err := echo(testCtx(t), c, rpc.WaitForReady(false)); status.Code(err) != codes.Unavailable {
		t.Fatalf("Echo with WaitForReady(false): %v, want Unavailable", err)
	}
}

// flaky is a bidirectional stream method: it reads every message, then
// fails the first fail calls with Unavailable (after sending one message
// when sendFirst), and otherwise echoes what it read.
type flaky struct {
	fail       atomic.Int64
	sendFirst  bool
	sendHeader bool
	mu         sync.Mutex
	previous   []string
}

func (f *flaky) collect(_ any, ss rpc.ServerStream) error {
	md, _ := metadata.FromIncomingContext(ss.Context())
	f.mu.Lock()
	f.previous = append(f.previous, strings.Join(md.Get("grpc-previous-rpc-attempts"), ","))
	f.mu.Unlock()
	var got [][]byte
	for {
		var m testpb.EchoRequest
		if err := ss.RecvMsg(&m); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		got = append(got, m.Payload)
	}
	if f.fail.Add(-1) >= 0 {
		if f.sendHeader {
			if err := ss.SendHeader(metadata.Pairs("sent", "yes")); err != nil {
				return err
			}
		}
		if f.sendFirst {
			if err := ss.SendMsg(&testpb.EchoResponse{Payload: got[0]}); err != nil {
				return err
			}
		}
		return status.Error(codes.Unavailable, "failing on purpose")
	}
	for _, p := range got {
		if err := ss.SendMsg(&testpb.EchoResponse{Payload: p}); err != nil {
			return err
		}
	}
	return nil
}

// TestRetryStream: a stream that fails before the server answered is
// opened again and its messages replayed, up to maxAttempts; once a
// message came, it is committed.
func TestRetryStream(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	f := &flaky{}
	srv := rpc.NewServer()
	srv.RegisterService(&rpc.ServiceDesc{
		ServiceName: "rdmarpc.test.v1.Flaky",
		Streams:     []rpc.StreamDesc{{StreamName: "Collect", ServerStreams: true, ClientStreams: true, Handler: f.collect}},
	}, f)
	lis, err := tr.Listen("flaky")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()
	config := strings.Replace(retryConfig(3, ""), `"service":"rdmarpc.test.v1.Test","method":"Echo"`, `"service":"rdmarpc.test.v1.Flaky"`, 1)
	r := manual.NewBuilderWithScheme("flaky")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: "flaky"}}})
	cc, _ := newClient(t, tr, r, rpc.WithDefaultServiceConfig(config))

	var before func(rpc.ClientStream) // run calls it on the new stream, when set
	run := func() ([]string, []string, error) {
		f.mu.Lock()
		f.previous = nil
		f.mu.Unlock()
		cs, err := cc.NewStream(testCtx(t), &rpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/rdmarpc.test.v1.Flaky/Collect")
		if err != nil {
			t.Fatal(err)
		}
		if before != nil {
			before(cs)
		}
		req := &testpb.EchoRequest{}
		for _, p := range []string{"a", "b", "c"} {
			req.Payload = []byte(p) // reused, as callers do: the replay has its own copies
			if err := cs.SendMsg(req); err != nil {
				t.Fatal(err)
			}
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			var m testpb.EchoResponse
			if err = cs.RecvMsg(&m); err != nil {
				break
			}
			got = append(got, string(m.Payload))
		}
		if err == io.EOF {
			err = nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return got, f.previous, err
	}

	f.fail.Store(2)
	got, attempts, err := run()
	if err != nil || strings.Join(got, "") != "abc" || strings.Join(attempts, "|") != "|1|2" {
		t.Fatalf("two failures then success: got %q, %v, attempts %q; want abc, nil, \"|1|2\"", got, err, attempts)
	}
	f.fail.Store(5)
	got, attempts, err = run()
	if status.Code(err) != codes.Unavailable || len(got) != 0 || len(attempts) != 3 {
		t.Fatalf("failing every time: got %q, %v after %d attempts; want Unavailable after 3", got, err, len(attempts))
	}
	f.fail.Store(1)
	f.sendFirst = true
	got, attempts, err = run()
	if status.Code(err) != codes.Unavailable || strings.Join(got, "") != "a" || len(attempts) != 1 {
		t.Fatalf("failing after a message: got %q, %v after %d attempts; want a, Unavailable after 1 (committed)", got, err, len(attempts))
	}
	f.fail.Store(1)
	f.sendFirst, f.sendHeader = false, true
	got, attempts, err = run()
	if status.Code(err) != codes.Unavailable || len(got) != 0 || len(attempts) != 1 {
		t.Fatalf("failing after the header: got %q, %v after %d attempts; want Unavailable after 1 (committed)", got, err, len(attempts))
	}
	// Asking for the stream's Context commits it, as gRPC-go's.
	f.fail.Store(1)
	f.sendHeader = false
	before = func(cs rpc.ClientStream) { _ = cs.Context() }
	got, attempts, err = run()
	if status.Code(err) != codes.Unavailable || len(got) != 0 || len(attempts) != 1 {
		t.Fatalf("failing after Context was asked for: got %q, %v after %d attempts; want Unavailable after 1 (committed)", got, err, len(attempts))
	}
	before = nil
	f.fail.Store(1)
	if got, attempts, err = run(); err != nil || len(attempts) != 2 {
		t.Fatalf("without Context: got %q, %v after %d attempts; want success after 2", got, err, len(attempts))
	}
}

// TestRetryPushback: the server's grpc-retry-pushback-ms (gRFC A6) sets
// the delay before the next attempt, and a negative or malformed one, or
// several, stops the retries.
func TestRetryPushback(t *testing.T) {
	b := &backend{code: codes.Unavailable}
	// A backoff of 1000 s: only the server's pushback lets a retry come
	// before the test's hang guard.
	config := strings.Replace(retryConfig(3, ""), `"initialBackoff":"0.001s","maxBackoff":"0.002s"`, `"initialBackoff":"1000s","maxBackoff":"1000s"`, 1)
	_, call := retryClient(t, b, config)
	for _, tc := range []struct {
		pushback []string
		attempts int
	}{
		{[]string{"-1"}, 1},
		{[]string{"soon"}, 1},
		{[]string{"1", "2"}, 1},
		{[]string{"99999999999"}, 1},
		{[]string{"0"}, 3},
		{[]string{"1"}, 3},
	} {
		b.trailer = metadata.MD{"grpc-retry-pushback-ms": tc.pushback}
		b.fail.Store(10)
		attempts, err := call()
		if status.Code(err) != codes.Unavailable || len(attempts) != tc.attempts {
			t.Fatalf("pushback %q: %v after %d attempts, want Unavailable after %d", tc.pushback, err, len(attempts), tc.attempts)
		}
	}
}

// TestRetryOptions: WithDisableRetry ignores the retry policy,
// WithMaxCallAttempts caps it (5 by default), and a request larger than
// MaxRetryRPCBufferSize is not retried.
func TestRetryOptions(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	b := &backend{code: codes.Unavailable}
	s := startServer(t, tr, b)
	r := manual.NewBuilderWithScheme("retryopts")
	r.InitialState(stateOf(s))
	attempts := func(c testpb.TestClient, opts ...rpc.CallOption) int {
		t.Helper()
		b.fail.Store(100)
		before := b.calls.Load()
		if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{Payload: []byte("0123456789")}, opts...); status.Code(err) != codes.Unavailable {
			t.Fatalf("call: %v, want Unavailable", err)
		}
		return int(b.calls.Load() - before)
	}
	config := rpc.WithDefaultServiceConfig(retryConfig(9, ""))
	for _, tc := range []struct {
		name string
		dial []rpc.DialOption
		call []rpc.CallOption
		want int
	}{
		{"default", nil, nil, 5},
		{"WithMaxCallAttempts(7)", []rpc.DialOption{rpc.WithMaxCallAttempts(7)}, nil, 7},
		{"WithMaxCallAttempts(3)", []rpc.DialOption{rpc.WithMaxCallAttempts(3)}, nil, 3},
		{"WithMaxCallAttempts(1)", []rpc.DialOption{rpc.WithMaxCallAttempts(1)}, nil, 5},
		{"WithDisableRetry", []rpc.DialOption{rpc.WithDisableRetry()}, nil, 1},
		{"MaxRetryRPCBufferSize(5)", nil, []rpc.CallOption{rpc.MaxRetryRPCBufferSize(5)}, 1},
		{"MaxRetryRPCBufferSize(100)", nil, []rpc.CallOption{rpc.MaxRetryRPCBufferSize(100)}, 5},
	} {
		cc, c := newClient(t, tr, r, append([]rpc.DialOption{config}, tc.dial...)...)
		if got := attempts(c, tc.call...); got != tc.want {
			t.Errorf("%s: %d attempts, want %d", tc.name, got, tc.want)
		}
		cc.Close()
	}
}

// TestGetMethodConfig: what the service config says of a method, as
// gRPC-go's GetMethodConfig reports it.
func TestGetMethodConfig(t *testing.T) {
	r := manual.NewBuilderWithScheme("getmc")
	cc, _ := newClient(t, pipe.New(pipe.Options{}), r, rpc.WithDefaultServiceConfig(`{"methodConfig":[
		{"name":[{"service":"s.S","method":"M"}],"waitForReady":true,"timeout":"1.5s",
		 "retryPolicy":{"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}},
		{"name":[{"service":"s.S"}],"timeout":"2s"}]}`))
	mc := cc.GetMethodConfig("/s.S/M")
	p := mc.RetryPolicy
	if mc.WaitForReady == nil || !*mc.WaitForReady || mc.Timeout == nil || *mc.Timeout != 1500*time.Millisecond || p == nil ||
		p.MaxAttempts != 4 || p.InitialBackoff != 100*time.Millisecond || p.MaxBackoff != time.Second || p.BackoffMultiplier != 2 ||
		!p.RetryableStatusCodes[codes.Unavailable] || len(p.RetryableStatusCodes) != 1 {
		t.Fatalf("/s.S/M: %+v, retry %+v", mc, p)
	}
	if mc := cc.GetMethodConfig("/s.S/Other"); mc.Timeout == nil || *mc.Timeout != 2*time.Second || mc.RetryPolicy != nil || mc.WaitForReady != nil {
		t.Fatalf("/s.S/Other takes the service's entry: %+v", mc)
	}
	if mc := cc.GetMethodConfig("/t.T/M"); mc.Timeout != nil || mc.RetryPolicy != nil || mc.WaitForReady != nil {
		t.Fatalf("/t.T/M has no entry: %+v", mc)
	}
}
