package codegen

import (
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/protobuf/compiler/protogen"
)

// Version is the generator's version, written into the header of every file
// it generates. It changes when the generated code changes.
const Version = "v0.2.0"

// PluginName is the name protoc knows the plugin by: protoc runs
// protoc-gen-go-rdmarpc for --go-rdmarpc_out.
const PluginName = "protoc-gen-go-rdmarpc"

// Options are the generator's own plugin options, given in the parameter
// string (--go-rdmarpc_opt=name=value). protogen handles the common ones
// itself: paths=import|source_relative, module=PREFIX, M<file>=<import path>,
// annotate_code.
type Options struct {
	// RequireUnimplementedServers makes XServer include an unexported
	// method that only UnimplementedXServer provides, so that
	// implementations must embed it (or UnsafeXServer, to opt out) and keep
	// compiling when methods are added to the service. Default true, as in
	// gRPC-go; require_unimplemented_servers=false turns it off.
	RequireUnimplementedServers bool

	// PackageSuffix, when set, puts the stubs into a package of their own,
	// named the messages' package name plus the suffix, in a directory of
	// that name inside the messages' directory; it imports the messages'
	// package. With it, stubs can be generated for a .proto file whose
	// messages are already compiled into a published Go package (say
	// google.golang.org/grpc/health/grpc_health_v1), which is then reused
	// rather than regenerated: two copies of a message package in one binary
	// panic at startup ("file ... is already registered"). Default "", the
	// messages' own package; package_suffix=rdmarpc sets it, as connect-go's
	// option of that name does.
	PackageSuffix string
}

// DefaultOptions are the options when the parameter string sets none.
func DefaultOptions() Options {
	return Options{RequireUnimplementedServers: true}
}

// Set sets one option from the parameter string. It has the signature of
// protogen.Options.ParamFunc, which protogen calls for every parameter it does
// not handle itself, so unknown names are rejected here.
func (o *Options) Set(name, value string) error {
	switch name {
	case "require_unimplemented_servers":
		if value == "" {
			value = "true"
		}
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("option %s=%s: want true or false", name, value)
		}
		o.RequireUnimplementedServers = b
		return nil
	case "package_suffix":
		o.PackageSuffix = value
		return nil
	}
	return fmt.Errorf("unknown option %q; %s takes require_unimplemented_servers=true|false, package_suffix=SUFFIX "+
		"and protogen's paths=import|source_relative, module=PREFIX, M<file.proto>=<Go import path>, annotate_code",
		name, PluginName)
}

// optionNames are the options Set knows.
var optionNames = []string{"require_unimplemented_servers", "package_suffix"}

// KnowsOption says whether name is one of the generator's own options (not
// protogen's).
func KnowsOption(name string) bool { return slices.Contains(optionNames, name) }

// ProtogenOptions returns the protogen options that feed parameters to o.
func (o *Options) ProtogenOptions() protogen.Options {
	return protogen.Options{ParamFunc: o.Set}
}
