package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/rdmarpc/rdmarpc/internal/dynamic"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// schemaFlags say where call, list, describe and bench find the services'
// descriptors: .proto files compiled in process (--proto, -I), or, without
// --proto, the server's reflection service.
type schemaFlags struct {
	protos      []string
	importPaths []string
}

func (f *schemaFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.protos, "proto", nil, "a .proto file that defines the services, compiled in process (repeatable); without it the schema comes from the server's reflection service")
	fl.StringArrayVarP(&f.importPaths, "import-path", "I", nil, "directory to search for the .proto files and their imports, as protoc's -I (repeatable; default .)")
}

// reflect reports whether the schema comes from the server.
func (f *schemaFlags) reflect() bool { return len(f.protos) == 0 }

// source returns the descriptors the flags name: the .proto files, or the
// reflection service of the server that conn connects to (conn is called
// only then; its failure is returned as it is). The func returned releases
// the source.
func (f *schemaFlags) source(ctx context.Context, conn func() (*rpc.ClientConn, error)) (dynamic.Source, func(), error) {
	if !f.reflect() {
		src, err := dynamic.LoadProtos(ctx, f.importPaths, f.protos)
		return src, func() {}, err
	}
	if len(f.importPaths) > 0 {
		return nil, nil, errors.New("-I says where to find --proto files, and none is given (without --proto the schema comes from the server's reflection service)")
	}
	cc, err := conn()
	if err != nil {
		return nil, nil, err
	}
	rs, err := newReflectionSource(ctx, cc)
	if err != nil {
		return nil, nil, err
	}
	return rs, rs.close, nil
}
