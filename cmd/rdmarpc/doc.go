// Command rdmarpc is the project's tool: it lists RDMA devices and their
// counters, and generates stubs from .proto files without protoc; it calls
// any method of a running server with JSON in and out (call, list,
// describe: grpcurl's job) and loads one with many calls (bench: ghz's),
// over every transport it links (tcp://, rdma://); port rewrites a gRPC-go
// program's imports by the port rule and lists what rdmarpc lacks of what it
// uses (checked against portapi.go, a table of the library's exported names
// that TestPortAPI keeps in sync); --version prints its version and its
// generators'. It must not depend on generated code, so
// that it can always regenerate it: call, list, describe and bench ask the
// server's reflection service, speaking it with dynamic messages from a
// built-in copy of reflection.proto (reflectproto.go), or take the
// services' .proto files and compile them in process (internal/dynamic,
// internal/compile).
//
// Each subcommand lives in its own file and adds itself to the root command
// from init. A failed call exits with 64 + its status code; any other
// failure with 1.
package main
