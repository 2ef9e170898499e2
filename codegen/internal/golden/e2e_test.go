package golden_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/codegen/internal/golden/common"
	multipb "github.com/rdmarpc/rdmarpc/codegen/internal/golden/multi"
	"github.com/rdmarpc/rdmarpc/codegen/internal/golden/nested/a/b"
	wktpb "github.com/rdmarpc/rdmarpc/codegen/internal/golden/wkt"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

// The end-to-end tests run generated stubs over the TCP transport: what a
// user of generated code relies on, through a real server and connection.

// greeter implements Greeter; LowerCase is left to the embedded
// UnimplementedGreeterServer.
type greeter struct {
	multipb.UnimplementedGreeterServer
}

func (greeter) Hello(ctx context.Context, in *multipb.HelloRequest) (*multipb.HelloReply, error) {
	greeting := "hello " + in.GetName()
	for _, v := range metadata.ValueFromIncomingContext(ctx, "x-title") {
		greeting += ", " + v
	}
	if err := rpc.SetHeader(ctx, metadata.Pairs("x-served-by", "greeter")); err != nil {
		return nil, err
	}
	if err := rpc.SetTrailer(ctx, metadata.Pairs("x-greetings", "1")); err != nil {
		return nil, err
	}
	return &multipb.HelloReply{Greeting: greeting}, nil
}

func (greeter) Goodbye(context.Context, *multipb.HelloRequest) (*multipb.HelloReply, error) {
	return nil, status.Error(codes.FailedPrecondition, "say hello first")
}

// Undocumented waits for the call's deadline and reports what it saw.
func (greeter) Undocumented(ctx context.Context, _ *multipb.HelloRequest) (*multipb.HelloReply, error) {
	if _, ok := ctx.Deadline(); !ok {
		return nil, status.Error(codes.Internal, "the server's context has no deadline")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// counter implements only Add of Counter.
type counter struct {
	multipb.UnimplementedCounterServer
}

func (counter) Add(_ context.Context, in *multipb.AddRequest) (*multipb.AddReply, error) {
	return &multipb.AddReply{Value: 40 + in.GetDelta()}, nil
}

type clock struct{ wktpb.UnimplementedClockServer }

func (clock) Wrap(_ context.Context, in *wktpb.Envelope) (*wktpb.Envelope, error) { return in, nil }

type tree struct{ b.UnimplementedTreeServer }

func (tree) Lookup(_ context.Context, in *b.Outer_Inner) (*common.Page, error) {
	return &common.Page{Token: in.GetId(), Size: in.GetN()}, nil
}

// echo serves rpctest's Test service (in this module; examples/ is a module
// of its own): Echo answers with the request's payload.
type echo struct{ testpb.UnimplementedTestServer }

func (echo) Echo(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Payload: in.GetPayload()}, nil
}

// methods records full method names, from the server's goroutines.
type methods struct {
	mu sync.Mutex
	m  []string
}

func (s *methods) add(m string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = append(s.m, m)
}

func (s *methods) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.m...)
}

func (s *methods) has(m string) bool { return slices.Contains(s.list(), m) }

// serve starts a server with the test services on a TCP port and returns a
// connection to it. The interceptor records the full method names it sees.
func serve(t *testing.T, seen *methods) *rpc.ClientConn {
	t.Helper()
	lis, err := transport.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer(rpc.UnaryInterceptor(func(ctx context.Context, req any, info *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
		seen.add(info.FullMethod)
		return h(ctx, req)
	}))
	multipb.RegisterGreeterServer(s, greeter{})
	multipb.RegisterCounterServer(s, &counter{})
	wktpb.RegisterClockServer(s, clock{})
	b.RegisterTreeServer(s, tree{})
	testpb.RegisterTestServer(s, echo{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cc, err := rpc.Dial(ctx, "tcp://"+lis.Addr().String())
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		s.Stop()
		if err := <-done; err != nil && !errors.Is(err, rpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return cc
}

func TestEndToEnd(t *testing.T) {
	var seen methods
	cc := serve(t, &seen)
	ctx := t.Context()
	greeterc := multipb.NewGreeterClient(cc)

	t.Run("call with metadata both ways", func(t *testing.T) {
		var header, trailer metadata.MD
		out, err := greeterc.Hello(metadata.AppendToOutgoingContext(ctx, "x-title", "dr"),
			&multipb.HelloRequest{Name: "ann"}, rpc.Header(&header), rpc.Trailer(&trailer))
		if err != nil {
			t.Fatal(err)
		}
		if out.GetGreeting() != "hello ann, dr" {
			t.Errorf("greeting %q; want %q", out.GetGreeting(), "hello ann, dr")
		}
		if got := header.Get("x-served-by"); len(got) != 1 || got[0] != "greeter" {
			t.Errorf("header x-served-by = %q", got)
		}
		if got := trailer.Get("x-greetings"); len(got) != 1 || got[0] != "1" {
			t.Errorf("trailer x-greetings = %q", got)
		}
	})

	t.Run("error code and message from the method", func(t *testing.T) {
		//lint:ignore SA1019 calls a deprecated method on purpose
		out, err := greeterc.Goodbye(ctx, &multipb.HelloRequest{})
		if out != nil || status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "say hello first" {
			t.Errorf("got %v, %v; want FailedPrecondition: say hello first", out, err)
		}
	})

	t.Run("Unimplemented from the embedded struct", func(t *testing.T) {
		_, err := greeterc.LowerCase(ctx, &multipb.HelloRequest{})
		if status.Code(err) != codes.Unimplemented || status.Convert(err).Message() != "method LowerCase not implemented" {
			t.Errorf("LowerCase: %v; want Unimplemented: method LowerCase not implemented", err)
		}
		_, err = multipb.NewCounterClient(cc).Reset(ctx, &emptypb.Empty{})
		if status.Code(err) != codes.Unimplemented || status.Convert(err).Message() != "method Reset not implemented" {
			t.Errorf("Reset: %v; want Unimplemented: method Reset not implemented", err)
		}
	})

	t.Run("service not registered", func(t *testing.T) {
		//lint:ignore SA1019 calls a deprecated service on purpose
		_, err := multipb.NewLegacyClient(cc).Ping(ctx, &emptypb.Empty{})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("Legacy.Ping: %v; want Unimplemented", err)
		}
	})

	t.Run("deadline", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := greeterc.Undocumented(dctx, &multipb.HelloRequest{})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("got %v; want DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the call returned after %v; the deadline was 200ms", d)
		}
	})

	t.Run("types of other packages and well-known types", func(t *testing.T) {
		add, err := multipb.NewCounterClient(cc).Add(ctx, &multipb.AddRequest{Delta: 2})
		if err != nil || add.GetValue() != 42 {
			t.Errorf("Add: %v, %v; want 42", add, err)
		}
		page, err := b.NewTreeClient(cc).Lookup(ctx, &b.Outer_Inner{Id: proto.String("leaf"), N: proto.Int32(7)})
		if err != nil || page.GetToken() != "leaf" || page.GetSize() != 7 {
			t.Errorf("Lookup: %v, %v", page, err)
		}
		attrs, err := structpb.NewStruct(map[string]any{"k": "v", "n": 1.5})
		if err != nil {
			t.Fatal(err)
		}
		body, err := anypb.New(wrapperspb.Int64(9))
		if err != nil {
			t.Fatal(err)
		}
		env := &wktpb.Envelope{Body: body, Attributes: attrs, Label: wrapperspb.String("l"), Mask: &fieldmaskpb.FieldMask{Paths: []string{"a.b"}}}
		got, err := wktpb.NewClockClient(cc).Wrap(ctx, env)
		if err != nil || !proto.Equal(got, env) {
			t.Errorf("Wrap: %v, %v", got, err)
		}
		_, err = wktpb.NewClockClient(cc).Now(ctx, &emptypb.Empty{})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("Now: %v; want Unimplemented", err)
		}
		payload := make([]byte, 1<<20)
		for i := range payload {
			payload[i] = byte(i)
		}
		echoed, err := testpb.NewTestClient(cc).Echo(ctx, &testpb.EchoRequest{Payload: payload})
		if err != nil || string(echoed.GetPayload()) != string(payload) {
			t.Errorf("Echo: %d payload bytes, %v", len(echoed.GetPayload()), err)
		}
	})

	t.Run("interceptors see the wire names", func(t *testing.T) {
		for _, want := range []string{multipb.Greeter_Hello_FullMethodName, "/rdmarpc.test.multi.Greeter/lower_case", "/rdmarpc.test.multi.Counter/Reset"} {
			if !seen.has(want) {
				t.Errorf("the server interceptor never saw %s; it saw %q", want, seen.list())
			}
		}
	})
}
