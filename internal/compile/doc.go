// Package compile is protoc without protoc: it compiles .proto files with
// github.com/bufbuild/protocompile, builds the CodeGeneratorRequest protoc
// would send a plugin, runs Go plugins in process (protoc-gen-go's generator
// and codegen's), and writes what they return. `rdmarpc gen` is a thin
// command over it.
//
// Its output is protoc's, byte for byte, except for the line of the file
// headers that names the compiler version: the request carries none, so
// headers say "protoc (unknown)", as with buf.
//
// Paths follow protoc: import paths (-I) are searched in order, an input
// file is named by its path relative to the import path that holds it, and
// the well-known types (google/protobuf/*.proto, go_features.proto among
// them) are built in, searched after the import paths. As with protoc's
// --descriptor_set_in, files may instead be taken already compiled from
// FileDescriptorSets. Diagnostics name files by their paths on disk, as
// file:line:col: message.
//
// compile knows protoc's conventions and the plugins it runs; it must not
// know the shape of the code they generate.
package compile
