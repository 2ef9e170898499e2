package reflection

import (
	"errors"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/internal/protoname"
	"github.com/rdmarpc/rdmarpc/reflection/grpc_reflection_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// ServiceInfoProvider gives the services to list; *rpc.Server is one. Only
// the names (the map's keys) are used.
type ServiceInfoProvider interface {
	GetServiceInfo() map[string]rpc.ServiceInfo
}

// GRPCServer is a server the reflection service registers on and lists;
// *rpc.Server is one. (The name is gRPC-go's.)
type GRPCServer interface {
	rpc.ServiceRegistrar
	ServiceInfoProvider
}

// ExtensionResolver finds extensions; protoregistry.GlobalTypes is one.
type ExtensionResolver interface {
	protoregistry.ExtensionTypeResolver
	RangeExtensionsByMessage(message protoreflect.FullName, f func(protoreflect.ExtensionType) bool)
}

// ServerOptions configure NewServerV1. The zero value lists nothing and
// describes what the global registries hold.
type ServerOptions struct {
	// Services are listed by list_services; none when nil.
	Services ServiceInfoProvider
	// DescriptorResolver finds files and symbols; protoregistry.GlobalFiles
	// when nil.
	DescriptorResolver protodesc.Resolver
	// ExtensionResolver finds extensions; protoregistry.GlobalTypes when nil.
	ExtensionResolver ExtensionResolver
}

// Register registers the reflection service (v1) on s, listing the services
// registered on s.
func Register(s GRPCServer) {
	grpc_reflection_v1.RegisterServerReflectionServer(s, NewServerV1(ServerOptions{Services: s}))
}

// RegisterV1 is Register: only v1 is served either way. (gRPC-go has both
// because its Register adds v1alpha.)
func RegisterV1(s GRPCServer) { Register(s) }

// NewServerV1 returns the reflection service, for
// grpc_reflection_v1.RegisterServerReflectionServer.
func NewServerV1(o ServerOptions) grpc_reflection_v1.ServerReflectionServer {
	if o.DescriptorResolver == nil {
		o.DescriptorResolver = protoregistry.GlobalFiles
	}
	if o.ExtensionResolver == nil {
		o.ExtensionResolver = protoregistry.GlobalTypes
	}
	return &server{o: o}
}

type server struct {
	grpc_reflection_v1.UnimplementedServerReflectionServer
	o ServerOptions
}

// ServerReflectionInfo answers each request in turn until the client
// half-closes.
func (s *server) ServerReflectionInfo(stream grpc_reflection_v1.ServerReflection_ServerReflectionInfoServer) error {
	sent := make(map[string]bool) // files already sent on this stream
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.answer(req, sent)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// answer returns the response to req; an error only for a request of no
// known kind, which ends the stream as in gRPC-go.
func (s *server) answer(req *grpc_reflection_v1.ServerReflectionRequest, sent map[string]bool) (*grpc_reflection_v1.ServerReflectionResponse, error) {
	resp := &grpc_reflection_v1.ServerReflectionResponse{ValidHost: req.GetHost(), OriginalRequest: req}
	var files []protoreflect.FileDescriptor
	var fail *status.Status
	switch r := req.GetMessageRequest().(type) {
	case *grpc_reflection_v1.ServerReflectionRequest_ListServices:
		resp.MessageResponse = &grpc_reflection_v1.ServerReflectionResponse_ListServicesResponse{ListServicesResponse: s.listServices()}
		return resp, nil
	case *grpc_reflection_v1.ServerReflectionRequest_FileByFilename:
		fd, err := s.o.DescriptorResolver.FindFileByPath(r.FileByFilename)
		if err != nil {
			fail = status.Newf(codes.NotFound, "file %s not found", protoname.Quote(r.FileByFilename))
			break
		}
		files = s.withImports(fd, sent)
	case *grpc_reflection_v1.ServerReflectionRequest_FileContainingSymbol:
		if fail = checkName("symbol", r.FileContainingSymbol); fail != nil {
			break
		}
		d, err := s.o.DescriptorResolver.FindDescriptorByName(protoreflect.FullName(r.FileContainingSymbol))
		if err != nil {
			fail = status.Newf(codes.NotFound, "symbol %s not found", protoname.Quote(r.FileContainingSymbol))
			break
		}
		files = s.withImports(d.ParentFile(), sent)
	case *grpc_reflection_v1.ServerReflectionRequest_FileContainingExtension:
		x := r.FileContainingExtension
		if fail = checkName("containing type", x.GetContainingType()); fail != nil {
			break
		}
		xt, err := s.o.ExtensionResolver.FindExtensionByNumber(protoreflect.FullName(x.GetContainingType()), protoreflect.FieldNumber(x.GetExtensionNumber()))
		if err != nil {
			fail = status.Newf(codes.NotFound, "extension %d of %s not found", x.GetExtensionNumber(), protoname.Quote(x.GetContainingType()))
			break
		}
		files = s.withImports(xt.TypeDescriptor().ParentFile(), sent)
	case *grpc_reflection_v1.ServerReflectionRequest_AllExtensionNumbersOfType:
		name := protoreflect.FullName(r.AllExtensionNumbersOfType)
		if fail = checkName("message type", string(name)); fail != nil {
			break
		}
		if d, err := s.o.DescriptorResolver.FindDescriptorByName(name); err != nil {
			fail = status.Newf(codes.NotFound, "message type %s not found", protoname.Quote(string(name)))
			break
		} else if _, ok := d.(protoreflect.MessageDescriptor); !ok {
			fail = status.Newf(codes.NotFound, "%s is not a message type", protoname.Quote(string(name)))
			break
		}
		var nums []int32
		s.o.ExtensionResolver.RangeExtensionsByMessage(name, func(xt protoreflect.ExtensionType) bool {
			nums = append(nums, int32(xt.TypeDescriptor().Number()))
			return true
		})
		slices.Sort(nums)
		resp.MessageResponse = &grpc_reflection_v1.ServerReflectionResponse_AllExtensionNumbersResponse{
			AllExtensionNumbersResponse: &grpc_reflection_v1.ExtensionNumberResponse{BaseTypeName: string(name), ExtensionNumber: nums},
		}
		return resp, nil
	default:
		return nil, status.Errorf(codes.InvalidArgument, "reflection: request of no known kind (%T)", r)
	}
	if fail != nil {
		resp.MessageResponse = &grpc_reflection_v1.ServerReflectionResponse_ErrorResponse{
			ErrorResponse: &grpc_reflection_v1.ErrorResponse{ErrorCode: int32(fail.Code()), ErrorMessage: fail.Message()},
		}
		return resp, nil
	}
	encoded := make([][]byte, 0, len(files))
	for _, fd := range files {
		b, err := proto.Marshal(protodesc.ToFileDescriptorProto(fd))
		if err != nil {
			return nil, status.Errorf(codes.Internal, "reflection: encoding %s: %v", fd.Path(), err)
		}
		encoded = append(encoded, b)
	}
	resp.MessageResponse = &grpc_reflection_v1.ServerReflectionResponse_FileDescriptorResponse{
		FileDescriptorResponse: &grpc_reflection_v1.FileDescriptorResponse{FileDescriptorProto: encoded},
	}
	return resp, nil
}

// checkName refuses, with InvalidArgument, a name that a lookup would pay
// for quadratically (package protoname): no registry holds one so long.
func checkName(what, name string) *status.Status {
	if err := protoname.Check(name); err != nil {
		return status.Newf(codes.InvalidArgument, "%s: %v", what, err)
	}
	return nil
}

// listServices names the services of s.o.Services, sorted.
func (s *server) listServices() *grpc_reflection_v1.ListServiceResponse {
	out := &grpc_reflection_v1.ListServiceResponse{}
	if s.o.Services == nil {
		return out
	}
	var names []string
	for name := range s.o.Services.GetServiceInfo() {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, n := range names {
		out.Service = append(out.Service, &grpc_reflection_v1.ServiceResponse{Name: n})
	}
	return out
}

// withImports returns fd, always, then its transitive imports that are not
// in sent, and marks them all sent. Each file is visited once, so the walk
// is bounded by the files fd reaches.
func (s *server) withImports(fd protoreflect.FileDescriptor, sent map[string]bool) []protoreflect.FileDescriptor {
	out := []protoreflect.FileDescriptor{fd}
	sent[fd.Path()] = true
	for i := 0; i < len(out); i++ {
		imports := out[i].Imports()
		for j := range imports.Len() {
			dep := imports.Get(j).FileDescriptor
			if dep.IsPlaceholder() || sent[dep.Path()] { // a placeholder has nothing to send
				continue
			}
			sent[dep.Path()] = true
			out = append(out, dep)
		}
	}
	return out
}
