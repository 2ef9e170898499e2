package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rdmarpc/rdmarpc/codegen"
	"github.com/rdmarpc/rdmarpc/internal/compile"
)

// genFlags are the flags of `rdmarpc gen`, named as protoc's.
type genFlags struct {
	importPaths []string
	descSets    string
	out         string
	opts        []string
	goOut       string
	goOpts      []string
	stubOut     string
	stubOpts    []string
}

func newGenCmd() *cobra.Command {
	var f genFlags
	cmd := &cobra.Command{
		Use:   "gen [flags] FILE.proto...",
		Short: "Generate Go messages and rdmarpc stubs from .proto files, without protoc",
		Long: `gen compiles .proto files and writes, for each foo.proto, the messages
(foo.pb.go, what protoc-gen-go writes) and the rdmarpc client and server stubs
(foo_rdmarpc.pb.go). It needs no protoc and no plugin binaries: both generators
run in process, and the result is what

  protoc --go_out=... --go-rdmarpc_out=...

writes, byte for byte, except the header line naming the protoc version, which
reads "(unknown)".

Flags follow protoc. Imports and input files are looked up in the -I
directories, in order ("." when none is given); google/protobuf/*.proto are
built in. Every file needs a go_package option, or an M<file>=<import path>
option. With paths=source_relative, files are written next to their .proto
(relative to the output directory); by default (paths=import) under their Go
import path, from which module=<prefix> strips a prefix.

With --descriptor_set_in, files are taken already compiled from
FileDescriptorSets (protoc -o --include_imports, buf build -o), named as in
the sets. --opt gives an option to each generator that takes it:
protoc-gen-go-rdmarpc's own (require_unimplemented_servers=false,
package_suffix=SUFFIX) go to it alone.`,
		Example: `  # messages and stubs next to echo.proto:
  rdmarpc gen --out . --opt paths=source_relative echo.proto

  # the same, spelled as with protoc:
  rdmarpc gen -I . --go_out=. --go_opt=paths=source_relative \
      --go-rdmarpc_out=. --go-rdmarpc_opt=paths=source_relative echo.proto`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGen(cmd, f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.importPaths, "proto_path", "I", nil, "directory to search for imports and input files (repeatable; default .)")
	fl.StringVar(&f.descSets, "descriptor_set_in", "", "FileDescriptorSet files (protoc -o, buf build -o) to take the files from instead of .proto sources, separated by "+string(filepath.ListSeparator))
	fl.StringVar(&f.out, "out", "", "output directory for both the messages and the stubs")
	fl.StringArrayVar(&f.opts, "opt", nil, "option for the generators that take it: both for paths=source_relative, only the stubs' for package_suffix=rdmarpc (repeatable)")
	fl.StringVar(&f.goOut, "go_out", "", "output directory for the messages (foo.pb.go); [OPTIONS:]DIR as with protoc")
	fl.StringArrayVar(&f.goOpts, "go_opt", nil, "option for the messages' generator, protoc-gen-go (repeatable)")
	fl.StringVar(&f.stubOut, "go-rdmarpc_out", "", "output directory for the stubs (foo_rdmarpc.pb.go); [OPTIONS:]DIR as with protoc")
	fl.StringArrayVar(&f.stubOpts, "go-rdmarpc_opt", nil, "option for the stubs' generator, protoc-gen-go-rdmarpc (repeatable)")
	return cmd
}

func init() { rootCmd.AddCommand(newGenCmd()) }

func runGen(cmd *cobra.Command, f genFlags, files []string) error {
	outs, err := f.outputs()
	if err != nil {
		return err
	}
	var sets []string
	if f.descSets != "" {
		if len(f.importPaths) > 0 {
			return errors.New("gen: --descriptor_set_in takes every file from the sets; -I would not be searched, so give one or the other")
		}
		sets = filepath.SplitList(f.descSets)
	}
	req, err := compile.Request(cmd.Context(), compile.Config{
		ImportPaths:    f.importPaths,
		DescriptorSets: sets,
		Files:          files,
		Warn:           func(w string) { fmt.Fprintln(cmd.ErrOrStderr(), w) },
	})
	if err != nil {
		return fmt.Errorf("gen:\n%w", err)
	}
	gen, err := compile.Generate(req, outs)
	if err != nil {
		return fmt.Errorf("gen:\n%w", err)
	}
	return compile.Write(gen)
}

// outputs turns the flags into the generators to run. An --opt goes to
// each generator that takes it, so that --opt require_unimplemented_servers=false
// does not make protoc-gen-go fail; one that neither takes is an error.
func (f genFlags) outputs() ([]compile.Output, error) {
	for _, o := range f.opts {
		if !compile.Go.Takes(o) && !compile.Rdmarpc.Takes(o) {
			name, _, _ := strings.Cut(o, "=")
			return nil, fmt.Errorf("gen: --opt %s: neither protoc-gen-go nor %s takes the option %q; "+
				"protoc-gen-go-rdmarpc takes require_unimplemented_servers=true|false and package_suffix=SUFFIX, "+
				"both take paths=import|source_relative, module=PREFIX, M<file.proto>=<Go import path>",
				o, codegen.PluginName, name)
		}
	}
	var outs []compile.Output
	add := func(p compile.Plugin, out string, opts []string) {
		if out == "" {
			out = f.out
		}
		if out == "" {
			return
		}
		var params []string
		// protoc's --NAME_out=OPTIONS:DIR form.
		if before, after, ok := strings.Cut(out, ":"); ok {
			params, out = append(params, before), after
		}
		for _, o := range f.opts {
			if p.Takes(o) {
				params = append(params, o)
			}
		}
		params = append(params, opts...)
		outs = append(outs, compile.Output{Plugin: p, Dir: out, Params: params})
	}
	add(compile.Go, f.goOut, f.goOpts)
	add(compile.Rdmarpc, f.stubOut, f.stubOpts)
	if len(outs) == 0 {
		return nil, errors.New("gen: nothing to generate; give --out DIR (or --go_out DIR and --go-rdmarpc_out DIR)")
	}
	return outs, nil
}
