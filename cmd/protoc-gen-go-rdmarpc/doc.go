// Command protoc-gen-go-rdmarpc is the protoc plugin that generates rdmarpc
// client and server stubs (foo_rdmarpc.pb.go) for the services in .proto
// files. protoc and buf run it for --go-rdmarpc_out; protoc-gen-go writes the
// messages (foo.pb.go) next to them:
//
//	protoc --go_out=. --go_opt=paths=source_relative \
//	    --go-rdmarpc_out=. --go-rdmarpc_opt=paths=source_relative foo.proto
//
// Options (--go-rdmarpc_opt, comma-separated): protogen's paths=, module=,
// M<file>=<import path> and annotate_code, and
// require_unimplemented_servers=false to drop the requirement that servers
// embed UnimplementedXServer, and package_suffix=SUFFIX to write the stubs
// into a package of their own (the messages' package name plus SUFFIX) that
// imports the messages' package. Unknown options are errors. --version
// prints the plugin's version.
//
// `rdmarpc gen` produces the same files without protoc.
package main
