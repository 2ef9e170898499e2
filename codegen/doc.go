// Package codegen generates rdmarpc stubs from .proto service definitions: for
// each service X, an XClient interface and NewXClient, an XServer interface,
// UnimplementedXServer (to embed by value), RegisterXServer, X_ServiceDesc and
// one X_M_FullMethodName constant per method, in a file named
// <name>_rdmarpc.pb.go next to the <name>.pb.go that protoc-gen-go writes.
//
// It is a protoc plugin as a library, built on
// google.golang.org/protobuf/compiler/protogen. Two programs drive it:
// cmd/protoc-gen-go-rdmarpc (run by protoc or buf) and `rdmarpc gen`, which
// compiles .proto files without protoc (see package codegen/compile). Both
// produce the same bytes.
//
// The generated code targets the rpc package: it fills rpc.ServiceDesc and
// calls rpc.ClientConnInterface.Invoke, and it pins the rpc API it was
// generated for with a reference to rpc.SupportPackageIsVersion1. rpc serves
// unary methods only, so a service with a streaming method is an error, never
// skipped.
//
// codegen knows the shape of generated code and the plugin options; it must
// not know how .proto files are found or compiled, nor anything about
// transports.
package codegen
