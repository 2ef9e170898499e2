// Package codegen generates rdmarpc stubs from .proto service definitions: for
// each service X, an XClient interface and NewXClient, an XServer interface,
// UnimplementedXServer (to embed by value), RegisterXServer, X_ServiceDesc and
// one X_M_FullMethodName constant per method, in a file named
// <name>_rdmarpc.pb.go next to the <name>.pb.go that protoc-gen-go writes.
//
// It is a protoc plugin as a library, built on
// google.golang.org/protobuf/compiler/protogen. Two programs drive it:
// cmd/protoc-gen-go-rdmarpc (run by protoc or buf) and `rdmarpc gen`, which
// compiles .proto files without protoc (see package internal/compile). Both
// produce the same bytes.
//
// The generated code targets the rpc package: it fills rpc.ServiceDesc
// (Methods and Streams), calls rpc.ClientConnInterface.Invoke and NewStream,
// and it pins the rpc API it was generated for with a reference to
// rpc.SupportPackageIsVersion2. Its API is protoc-gen-go-grpc's (v1.6, with
// generic streams), read with package grpc as rpc: the same names,
// signatures and X_YClient / X_YServer stream aliases, so code written
// against gRPC-go's stubs compiles against these. (rpc does not run streams
// yet: NewStream fails with codes.Unimplemented.)
//
// The option package_suffix writes the stubs into a package of their own
// that imports the messages' package, so that published message packages
// can be reused rather than regenerated.
//
// codegen knows the shape of generated code and the plugin options; it must
// not know how .proto files are found or compiled, nor anything about
// transports.
package codegen
