package reflection_test

import (
	"github.com/rdmarpc/rdmarpc/reflection"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// Registering reflection, as with gRPC-go's reflection.Register: the
// services registered on s are listed, and described from the files their
// generated code registered with protobuf.
func Example() {
	s := rpc.NewServer()
	// ... register the services ...
	reflection.Register(s)
	// ... s.Serve(lis) ...
}
