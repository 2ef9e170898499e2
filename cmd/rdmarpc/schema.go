package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/rdmarpc/rdmarpc/internal/dynamic"
)

// schemaFlags say where call, list, describe and bench find the services'
// descriptors.
type schemaFlags struct {
	protos      []string
	importPaths []string
	reflection  bool
}

func (f *schemaFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.protos, "proto", nil, "a .proto file that defines the services, compiled in process (repeatable)")
	fl.StringArrayVarP(&f.importPaths, "import-path", "I", nil, "directory to search for the .proto files and their imports, as protoc's -I (repeatable; default .)")
	fl.BoolVar(&f.reflection, "reflection", false, "ask the server for its descriptors (server reflection; not available yet)")
}

// errNoReflection is the answer to --reflection until rdmarpc serves
// reflection. That is where a reflection client, a dynamic.Source, plugs
// in: source() returns it instead of the compiled files.
var errNoReflection = errors.New("--reflection: rdmarpc has no server reflection service yet; give the service's .proto files with --proto (and -I)")

// source returns the descriptors the flags name.
func (f *schemaFlags) source(ctx context.Context) (dynamic.Source, error) {
	if f.reflection {
		return nil, errNoReflection
	}
	return dynamic.LoadProtos(ctx, f.importPaths, f.protos)
}
