// Command rdmarpc is the project's tool: it lists RDMA devices and their
// counters, and generates stubs from .proto files without protoc; --version
// prints its version and its generators'. It must not depend on generated
// code, so that it can always regenerate it.
//
// Each subcommand lives in its own file and adds itself to the root command
// from init.
package main
