package golden_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	multipb "github.com/rdmarpc/rdmarpc/codegen/internal/golden/multi"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// These tests call generated code directly, without a network: what the
// stubs themselves promise. e2e_test.go runs them over a real connection.

type registrar struct {
	desc *rpc.ServiceDesc
	impl any
}

func (r *registrar) RegisterService(desc *rpc.ServiceDesc, impl any) { r.desc, r.impl = desc, impl }

type greeterByValue struct {
	multipb.UnimplementedGreeterServer
}

type greeterByPointer struct {
	*multipb.UnimplementedGreeterServer
}

func (greeterByValue) Hello(_ context.Context, in *multipb.HelloRequest) (*multipb.HelloReply, error) {
	return &multipb.HelloReply{Greeting: "hello " + in.GetName()}, nil
}

func TestRegisterRefusesNilEmbeddedPointer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		srv       multipb.GreeterServer
		wantPanic string
	}{
		{name: "by value", srv: greeterByValue{}},
		{name: "pointer to by value", srv: &greeterByValue{}},
		{name: "by pointer, set", srv: greeterByPointer{&multipb.UnimplementedGreeterServer{}}},
		{name: "by pointer, nil", srv: greeterByPointer{},
			wantPanic: "RegisterGreeterServer: golden_test.greeterByPointer embeds *UnimplementedGreeterServer and that pointer is nil; " +
				"embed UnimplementedGreeterServer by value instead (struct{ multipb.UnimplementedGreeterServer; ... })"},
		{name: "pointer to by pointer, nil", srv: &greeterByPointer{},
			wantPanic: "RegisterGreeterServer: *golden_test.greeterByPointer embeds *UnimplementedGreeterServer and that pointer is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r registrar
			got := func() (msg string) {
				defer func() {
					if p := recover(); p != nil {
						msg = fmt.Sprint(p)
					}
				}()
				multipb.RegisterGreeterServer(&r, tc.srv)
				return ""
			}()
			switch {
			case tc.wantPanic == "" && got != "":
				t.Fatalf("panicked: %s", got)
			case tc.wantPanic != "" && !strings.Contains(got, tc.wantPanic):
				t.Fatalf("panic %q; want it to contain %q", got, tc.wantPanic)
			case tc.wantPanic == "" && (r.desc != &multipb.Greeter_ServiceDesc || r.impl != tc.srv):
				t.Fatalf("registered %v, %v; want Greeter_ServiceDesc and the implementation", r.desc, r.impl)
			case tc.wantPanic != "" && r.desc != nil:
				t.Fatal("registered the service before panicking")
			}
		})
	}
}

func TestServiceDesc(t *testing.T) {
	d := multipb.Greeter_ServiceDesc
	if d.ServiceName != "rdmarpc.test.multi.Greeter" || d.Metadata != "multi/multi.proto" {
		t.Errorf("ServiceName %q, Metadata %v", d.ServiceName, d.Metadata)
	}
	if _, ok := d.HandlerType.(*multipb.GreeterServer); !ok {
		t.Errorf("HandlerType is %T; want *GreeterServer", d.HandlerType)
	}
	var names []string
	for _, m := range d.Methods {
		names = append(names, m.MethodName)
	}
	// Wire names, as declared: lower_case, not LowerCase.
	if got, want := strings.Join(names, " "), "Hello Goodbye Undocumented lower_case"; got != want {
		t.Errorf("methods %q; want %q", got, want)
	}
	if multipb.Greeter_LowerCase_FullMethodName != "/rdmarpc.test.multi.Greeter/lower_case" {
		t.Errorf("Greeter_LowerCase_FullMethodName = %q", multipb.Greeter_LowerCase_FullMethodName)
	}
	if len(multipb.Nothing_ServiceDesc.Methods) != 0 || multipb.Nothing_ServiceDesc.ServiceName != "rdmarpc.test.multi.Nothing" {
		t.Errorf("Nothing_ServiceDesc = %+v", multipb.Nothing_ServiceDesc)
	}
}

// handler returns the generated handler of a method of Greeter.
func handler(t *testing.T, method string) rpc.MethodHandler {
	t.Helper()
	for _, m := range multipb.Greeter_ServiceDesc.Methods {
		if m.MethodName == method {
			return m.Handler
		}
	}
	t.Fatalf("no method %s", method)
	return nil
}

// decoder decodes req the way the server does: from its wire bytes.
func decoder(t *testing.T, req proto.Message) func(any) error {
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return func(v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
}

func TestHandlers(t *testing.T) {
	ctx := t.Context()
	srv := greeterByValue{}

	t.Run("without interceptor", func(t *testing.T) {
		out, err := handler(t, "Hello")(srv, ctx, decoder(t, &multipb.HelloRequest{Name: "ann"}), nil)
		if err != nil || out.(*multipb.HelloReply).GetGreeting() != "hello ann" {
			t.Fatalf("got %v, %v", out, err)
		}
	})

	t.Run("interceptor sees the call and can change it", func(t *testing.T) {
		var info *rpc.UnaryServerInfo
		icpt := func(ctx context.Context, req any, i *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
			info = i
			req.(*multipb.HelloRequest).Name += " (intercepted)"
			return h(ctx, req)
		}
		out, err := handler(t, "Hello")(srv, ctx, decoder(t, &multipb.HelloRequest{Name: "bob"}), icpt)
		if err != nil || out.(*multipb.HelloReply).GetGreeting() != "hello bob (intercepted)" {
			t.Fatalf("got %v, %v", out, err)
		}
		if info.FullMethod != multipb.Greeter_Hello_FullMethodName || info.Server != srv {
			t.Errorf("info = %+v", info)
		}
	})

	t.Run("decode error stops the call", func(t *testing.T) {
		bad := errors.New("bad bytes")
		called := false
		icpt := func(ctx context.Context, req any, _ *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
			called = true
			return h(ctx, req)
		}
		_, err := handler(t, "Hello")(srv, ctx, func(any) error { return bad }, icpt)
		if !errors.Is(err, bad) || called {
			t.Errorf("err %v, interceptor called %v; want the decode error and no call", err, called)
		}
	})

	t.Run("embedded Unimplemented", func(t *testing.T) {
		_, err := handler(t, "lower_case")(srv, ctx, decoder(t, &multipb.HelloRequest{}), nil)
		if status.Code(err) != codes.Unimplemented || status.Convert(err).Message() != "method LowerCase not implemented" {
			t.Errorf("err = %v; want Unimplemented, method LowerCase not implemented", err)
		}
	})
}

// recordingConn is a ClientConnInterface that answers every call itself.
type recordingConn struct {
	method string
	opts   int
}

func (c *recordingConn) Invoke(_ context.Context, method string, req, reply any, opts ...rpc.CallOption) error {
	c.method, c.opts = method, len(opts)
	if method == multipb.Greeter_Goodbye_FullMethodName {
		return status.Error(codes.NotFound, "gone")
	}
	reply.(*multipb.HelloReply).Greeting = "to " + req.(*multipb.HelloRequest).GetName()
	return nil
}

func (c *recordingConn) NewStream(context.Context, *rpc.StreamDesc, string, ...rpc.CallOption) (rpc.ClientStream, error) {
	return nil, errors.New("recordingConn opens no streams")
}

func TestClient(t *testing.T) {
	cc := &recordingConn{}
	c := multipb.NewGreeterClient(cc)
	out, err := c.LowerCase(t.Context(), &multipb.HelloRequest{Name: "cy"}, rpc.MaxCallRecvMsgSize(1), rpc.MaxCallSendMsgSize(1))
	if err != nil || out.GetGreeting() != "to cy" {
		t.Fatalf("got %v, %v", out, err)
	}
	if cc.method != "/rdmarpc.test.multi.Greeter/lower_case" || cc.opts != 2 {
		t.Errorf("Invoke(%q, %d options); want the wire name and both options", cc.method, cc.opts)
	}
	//lint:ignore SA1019 the test calls a deprecated method on purpose
	out, err = c.Goodbye(t.Context(), &multipb.HelloRequest{})
	if out != nil || status.Code(err) != codes.NotFound {
		t.Errorf("got %v, %v; want nil and the call's error", out, err)
	}
}
