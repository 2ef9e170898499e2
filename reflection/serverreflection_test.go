package reflection_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	_ "google.golang.org/protobuf/types/known/apipb" // google/protobuf/api.proto and its imports, in the global registry

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/internal/protoname"
	"github.com/rdmarpc/rdmarpc/reflection"
	rpb "github.com/rdmarpc/rdmarpc/reflection/grpc_reflection_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hang bounds every wait that should end promptly; reaching it is a hang,
// not slowness.
const hang = time.Minute

var transports = []struct {
	name string
	tr   func() transport.Transport
	addr string
}{
	{"pipe", func() transport.Transport { return pipe.New(pipe.Options{}) }, "reflection:0"},
	{"tcp", func() transport.Transport { return tcp.New(tcp.Options{}) }, "127.0.0.1:0"},
}

type testService struct{ testpb.UnimplementedTestServer }

// forEach runs fn over each transport against a server with the Test,
// health and reflection services; register, when set, registers the
// reflection service in place of reflection.Register.
func forEach(t *testing.T, register func(*rpc.Server), fn func(t *testing.T, c rpb.ServerReflectionClient)) {
	for _, x := range transports {
		t.Run(x.name, func(t *testing.T) {
			tr := x.tr()
			srv := rpc.NewServer()
			testpb.RegisterTestServer(srv, testService{})
			healthpb.RegisterHealthServer(srv, health.NewServer())
			if register != nil {
				register(srv)
			} else {
				reflection.Register(srv)
			}
			lis, err := tr.Listen(x.addr)
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(lis) }()
			t.Cleanup(func() {
				srv.Stop()
				if err := <-served; err != nil {
					t.Errorf("Serve: %v", err)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			defer cancel()
			cc, err := rpc.Dial(ctx, lis.Addr().String(), rpc.WithTransport(tr))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			fn(t, rpb.NewServerReflectionClient(cc))
		})
	}
}

// session is one ServerReflectionInfo stream.
type session struct {
	t *testing.T
	s rpb.ServerReflection_ServerReflectionInfoClient
}

func open(t *testing.T, c rpb.ServerReflectionClient) *session {
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	t.Cleanup(cancel)
	s, err := c.ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &session{t: t, s: s}
}

func (x *session) ask(req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
	x.t.Helper()
	if err := x.s.Send(req); err != nil {
		x.t.Fatalf("Send: %v", err)
	}
	resp, err := x.s.Recv()
	if err != nil {
		x.t.Fatalf("Recv: %v", err)
	}
	if !proto.Equal(resp.GetOriginalRequest(), req) {
		x.t.Fatalf("original_request = %v, want %v", resp.GetOriginalRequest(), req)
	}
	return resp
}

// files asks req and returns the names of the files answered, in order,
// and the files decoded.
func (x *session) files(req *rpb.ServerReflectionRequest) ([]string, []*descriptorpb.FileDescriptorProto) {
	x.t.Helper()
	resp := x.ask(req)
	if e := resp.GetErrorResponse(); e != nil {
		x.t.Fatalf("%v: error %d %q", req, e.GetErrorCode(), e.GetErrorMessage())
	}
	var names []string
	var fds []*descriptorpb.FileDescriptorProto
	for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(b, fd); err != nil {
			x.t.Fatal(err)
		}
		names = append(names, fd.GetName())
		fds = append(fds, fd)
	}
	return names, fds
}

func symbol(s string) *rpb.ServerReflectionRequest {
	return &rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: s}}
}

func filename(s string) *rpb.ServerReflectionRequest {
	return &rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileByFilename{FileByFilename: s}}
}

func TestListServices(t *testing.T) {
	forEach(t, nil, func(t *testing.T, c rpb.ServerReflectionClient) {
		resp := open(t, c).ask(&rpb.ServerReflectionRequest{Host: "h", MessageRequest: &rpb.ServerReflectionRequest_ListServices{}})
		var got []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			got = append(got, s.GetName())
		}
		want := []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "rdmarpc.test.v1.Test"}
		if !slices.Equal(got, want) {
			t.Errorf("list_services = %v, want %v", got, want)
		}
		if resp.GetValidHost() != "h" {
			t.Errorf("valid_host = %q, want the request's host", resp.GetValidHost())
		}
	})
}

// TestDescribeService: the file of a registered service, by a symbol of
// each kind, decodes into descriptors that describe the service.
func TestDescribeService(t *testing.T) {
	forEach(t, nil, func(t *testing.T, c rpb.ServerReflectionClient) {
		x := open(t, c)
		for _, sym := range []string{"rdmarpc.test.v1.Test", "rdmarpc.test.v1.Test.Echo", "rdmarpc.test.v1.EchoRequest", "rdmarpc.test.v1.EchoRequest.payload"} {
			names, fds := x.files(symbol(sym))
			if len(names) != 1 || names[0] != "test.proto" {
				t.Fatalf("file_containing_symbol %s: files %v, want [test.proto]", sym, names)
			}
			fd, err := protodesc.NewFile(fds[0], protoregistry.GlobalFiles)
			if err != nil {
				t.Fatal(err)
			}
			svc := fd.Services().ByName("Test")
			if svc == nil || svc.Methods().ByName("Echo") == nil || svc.Methods().ByName("Echo").Input().FullName() != "rdmarpc.test.v1.EchoRequest" {
				t.Fatalf("file_containing_symbol %s: no Test.Echo taking EchoRequest in %v", sym, fds[0])
			}
		}
		// The health file, which a server with health has, by its name.
		if names, _ := x.files(filename("grpc/health/v1/health.proto")); !slices.Equal(names, []string{"grpc/health/v1/health.proto"}) {
			t.Errorf("file_by_filename health.proto: %v", names)
		}
	})
}

// TestDependencies: a file comes with its transitive imports, each sent
// once per stream; a new stream starts afresh.
func TestDependencies(t *testing.T) {
	forEach(t, nil, func(t *testing.T, c rpb.ServerReflectionClient) {
		x := open(t, c)
		names, _ := x.files(symbol("google.protobuf.Api"))
		slices.Sort(names[1:])
		want := []string{"google/protobuf/api.proto", "google/protobuf/any.proto", "google/protobuf/source_context.proto", "google/protobuf/type.proto"}
		if !slices.Equal(names, want) {
			t.Fatalf("google.protobuf.Api: files %v, want %v (the file first)", names, want)
		}
		// type.proto again: itself (asked for), none of its imports (sent).
		if names, _ := x.files(filename("google/protobuf/type.proto")); !slices.Equal(names, []string{"google/protobuf/type.proto"}) {
			t.Fatalf("type.proto on the same stream: %v, want it alone", names)
		}
		names, _ = open(t, c).files(filename("google/protobuf/type.proto"))
		slices.Sort(names[1:])
		if want := []string{"google/protobuf/type.proto", "google/protobuf/any.proto", "google/protobuf/source_context.proto"}; !slices.Equal(names, want) {
			t.Fatalf("type.proto on a new stream: %v, want %v", names, want)
		}
	})
}

// TestErrors: what cannot be answered gets an ErrorResponse, and the
// stream goes on.
func TestErrors(t *testing.T) {
	forEach(t, nil, func(t *testing.T, c rpb.ServerReflectionClient) {
		x := open(t, c)
		for _, req := range []*rpb.ServerReflectionRequest{
			symbol("rdmarpc.test.v1.Nope"),
			symbol(""),
			symbol(strings.Repeat("a.", 10)),
			filename("nope.proto"),
			{MessageRequest: &rpb.ServerReflectionRequest_FileContainingExtension{FileContainingExtension: &rpb.ExtensionRequest{ContainingType: "google.protobuf.MessageOptions", ExtensionNumber: 50001}}},
			{MessageRequest: &rpb.ServerReflectionRequest_AllExtensionNumbersOfType{AllExtensionNumbersOfType: "nope.Message"}},
			{MessageRequest: &rpb.ServerReflectionRequest_AllExtensionNumbersOfType{AllExtensionNumbersOfType: "rdmarpc.test.v1.Test"}}, // a service
		} {
			e := x.ask(req).GetErrorResponse()
			if e == nil || codes.Code(e.GetErrorCode()) != codes.NotFound {
				t.Errorf("%v: error response %v, want NotFound", req, e)
			}
		}
		// Still answering.
		if names, _ := x.files(symbol("rdmarpc.test.v1.Test")); len(names) != 1 {
			t.Fatalf("after errors: %v", names)
		}
		// A request of no kind ends the stream, as in gRPC-go.
		if err := x.s.Send(&rpb.ServerReflectionRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := x.s.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("empty request: %v, want InvalidArgument", err)
		}
	})
}

// countingResolver is a resolver that adds up what its lookups would cost
// protoregistry: it tries each dotted prefix of a name, longest first,
// hashing it whole, so a lookup that finds nothing hashes the sum of the
// prefixes' lengths. The sum is counted in one pass over the name.
type countingResolver struct {
	protodesc.Resolver
	work atomic.Int64 // bytes hashed, by that count
}

func (r *countingResolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	work := int64(len(name))
	for i := range len(name) {
		if name[i] == '.' {
			work += int64(i) // the prefix before this dot
		}
	}
	r.work.Add(work)
	return r.Resolver.FindDescriptorByName(name)
}

// TestLongNames: a name no registry holds, such as a 1 MiB "a.a.a…", is
// refused with InvalidArgument before any lookup, and what does reach the
// resolver costs it at most protoname.MaxParts bytes hashed per byte asked
// (issue 20: a 1 MiB symbol cost the server 10.7 s of CPU). The names at
// the bounds are still looked up.
func TestLongNames(t *testing.T) {
	res := &countingResolver{Resolver: protoregistry.GlobalFiles}
	register := func(s *rpc.Server) {
		rpb.RegisterServerReflectionServer(s, reflection.NewServerV1(reflection.ServerOptions{Services: s, DescriptorResolver: res}))
	}
	dotted := func(n int) string { return strings.Repeat("a.", n/2+1)[:n] } // "a.a.a…", n bytes
	allExtensions := func(s string) *rpb.ServerReflectionRequest {
		return &rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_AllExtensionNumbersOfType{AllExtensionNumbersOfType: s}}
	}
	extension := func(s string) *rpb.ServerReflectionRequest {
		return &rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingExtension{FileContainingExtension: &rpb.ExtensionRequest{ContainingType: s, ExtensionNumber: 1}}}
	}
	atBound := strings.Repeat("b", protoname.MaxLen-2*(protoname.MaxParts-1)) + strings.Repeat(".a", protoname.MaxParts-1)
	for _, tc := range []struct {
		name string
		req  *rpb.ServerReflectionRequest
		asks string
		want codes.Code
	}{
		{"1 MiB symbol", symbol(dotted(1 << 20)), dotted(1 << 20), codes.InvalidArgument},
		{"1 MiB message type", allExtensions(dotted(1 << 20)), dotted(1 << 20), codes.InvalidArgument},
		{"1 MiB containing type", extension(dotted(1 << 20)), dotted(1 << 20), codes.InvalidArgument},
		{"one byte too long", symbol(strings.Repeat("b", protoname.MaxLen+1)), strings.Repeat("b", protoname.MaxLen+1), codes.InvalidArgument},
		{"one part too many", symbol(dotted(2*protoname.MaxParts + 1)), dotted(2*protoname.MaxParts + 1), codes.InvalidArgument},
		{"at both bounds", symbol(atBound), atBound, codes.NotFound},
		{"at both bounds, message type", allExtensions(atBound), atBound, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEach(t, register, func(t *testing.T, c rpb.ServerReflectionClient) {
				res.work.Store(0)
				x := open(t, c)
				e := x.ask(tc.req).GetErrorResponse()
				if got := codes.Code(e.GetErrorCode()); e == nil || got != tc.want {
					t.Errorf("error response %v (of %d bytes), want %v", got, len(e.GetErrorMessage()), tc.want)
				}
				if len(e.GetErrorMessage()) > 512 {
					t.Errorf("an error message of %d bytes: it should not echo the name whole", len(e.GetErrorMessage()))
				}
				if work, most := res.work.Load(), int64(protoname.MaxParts*len(tc.asks)); work > most {
					t.Errorf("the lookups hashed %d bytes for a name of %d: more than %d times its length", work, len(tc.asks), protoname.MaxParts)
				}
				// The stream goes on.
				if names, _ := x.files(symbol("rdmarpc.test.v1.Test")); len(names) != 1 {
					t.Fatalf("then rdmarpc.test.v1.Test: %v", names)
				}
			})
		})
	}
}

// extensionFiles builds, in registries of their own, a file that extends
// google.protobuf.MessageOptions with fields 50001 and 50002.
func extensionFiles(t *testing.T) (*protoregistry.Files, *protoregistry.Types) {
	t.Helper()
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("ext/ext.proto"),
		Package:    proto.String("ext.v1"),
		Dependency: []string{"google/protobuf/descriptor.proto"},
		Syntax:     proto.String("proto3"),
	}
	for _, n := range []int32{50002, 50001} {
		fdp.Extension = append(fdp.Extension, &descriptorpb.FieldDescriptorProto{
			Name:     proto.String("x" + string(rune('0'+n%10))),
			Number:   proto.Int32(n),
			Label:    descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			Type:     descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
			Extendee: proto.String(".google.protobuf.MessageOptions"),
		})
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	files := new(protoregistry.Files)
	for _, f := range []protoreflect.FileDescriptor{descriptorpb.File_google_protobuf_descriptor_proto, fd} {
		if err := files.RegisterFile(f); err != nil {
			t.Fatal(err)
		}
	}
	types := new(protoregistry.Types)
	for i := range fd.Extensions().Len() {
		if err := types.RegisterExtension(dynamicpb.NewExtensionType(fd.Extensions().Get(i))); err != nil {
			t.Fatal(err)
		}
	}
	return files, types
}

// TestExtensions answers extension questions from resolvers given as
// options.
func TestExtensions(t *testing.T) {
	files, types := extensionFiles(t)
	register := func(s *rpc.Server) {
		rpb.RegisterServerReflectionServer(s, reflection.NewServerV1(reflection.ServerOptions{Services: s, DescriptorResolver: files, ExtensionResolver: types}))
	}
	forEach(t, register, func(t *testing.T, c rpb.ServerReflectionClient) {
		x := open(t, c)
		resp := x.ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_AllExtensionNumbersOfType{AllExtensionNumbersOfType: "google.protobuf.MessageOptions"}})
		got := resp.GetAllExtensionNumbersResponse()
		if got.GetBaseTypeName() != "google.protobuf.MessageOptions" || !slices.Equal(got.GetExtensionNumber(), []int32{50001, 50002}) {
			t.Fatalf("all_extension_numbers_of_type: %v, want MessageOptions [50001 50002]", resp)
		}
		names, _ := x.files(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingExtension{FileContainingExtension: &rpb.ExtensionRequest{ContainingType: "google.protobuf.MessageOptions", ExtensionNumber: 50002}}})
		if want := []string{"ext/ext.proto", "google/protobuf/descriptor.proto"}; !slices.Equal(names, want) {
			t.Fatalf("file_containing_extension: %v, want %v", names, want)
		}
		// The resolver given is the only one: the Test service's file is
		// not in it.
		if e := x.ask(symbol("rdmarpc.test.v1.Test")).GetErrorResponse(); codes.Code(e.GetErrorCode()) != codes.NotFound {
			t.Fatalf("a symbol outside the resolver: %v, want NotFound", e)
		}
	})
}
