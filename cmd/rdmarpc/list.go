package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rdmarpc/rdmarpc/internal/dynamic"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// schemaCmdFlags are list's and describe's: where the schema comes from,
// and how to reach a server that serves reflection.
type schemaCmdFlags struct {
	schemaFlags
	dialFlags
}

// open returns the source the flags and args name, and the args that
// follow TARGET. Without --proto the first argument is the TARGET whose
// reflection service answers; with --proto there is none.
func (f *schemaCmdFlags) open(cmd *cobra.Command, args []string) (dynamic.Source, []string, func(), error) {
	if !f.reflect() {
		if len(args) > 0 && strings.Contains(args[0], "://") {
			return nil, nil, nil, &usageError{fmt.Errorf("%s: with --proto the schema comes from the files, and no server is asked; drop the TARGET (or --proto, to ask its reflection service)", args[0])}
		}
		src, done, err := f.source(cmd.Context(), nil)
		return src, args, done, err
	}
	if len(args) == 0 || !strings.Contains(args[0], "://") {
		return nil, nil, nil, &usageError{errors.New("give the TARGET (tcp://host:port, rdma://host:port) whose reflection service to ask, or the services' .proto files with --proto")}
	}
	if err := checkTarget(args[0]); err != nil {
		return nil, nil, nil, err
	}
	var cc *rpc.ClientConn
	src, done, err := f.source(cmd.Context(), func() (*rpc.ClientConn, error) {
		var err error
		cc, err = f.dial(cmd.Context(), args[0], cmd.ErrOrStderr())
		return cc, err
	})
	if err != nil {
		if cc != nil {
			cc.Close()
		}
		return nil, nil, nil, err
	}
	return src, args[1:], func() { done(); cc.Close() }, nil
}

func newListCmd() *cobra.Command {
	var f schemaCmdFlags
	cmd := &cobra.Command{
		Use:   "list [flags] [TARGET] [SERVICE]",
		Short: "List the services of a server or of .proto files, or the methods of one service",
		Long: `list prints the full names of the services the server at TARGET offers, as
its reflection service (grpc.reflection.v1) lists them, one a line; given a
service, it prints its methods as package.Service.Method, one a line. With
--proto it lists the services of the .proto files instead (and of those they
import), and takes no TARGET.`,
		Example: `  rdmarpc list tcp://127.0.0.1:7070
  rdmarpc list tcp://127.0.0.1:7070 rdmarpc.kvstore.v1.KV
  rdmarpc list -I examples/kvstore/kvpb --proto kv.proto rdmarpc.kvstore.v1.KV`,
		Args: nArgs(0, 2, "[TARGET] and [SERVICE]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, rest, done, err := f.open(cmd, args)
			if err != nil {
				return err
			}
			defer done()
			out := cmd.OutOrStdout()
			switch len(rest) {
			case 0:
				names, err := src.ListServices(cmd.Context())
				if err != nil {
					return err
				}
				for _, n := range names {
					fmt.Fprintln(out, n)
				}
				return nil
			case 1:
			default:
				return &usageError{fmt.Errorf("list takes one SERVICE, not %d", len(rest))}
			}
			d, err := src.FindSymbol(cmd.Context(), strings.TrimPrefix(rest[0], "/"))
			if err != nil {
				return err
			}
			sd, ok := d.(protoreflect.ServiceDescriptor)
			if !ok {
				return fmt.Errorf("%s is not a service (describe it with rdmarpc describe)", rest[0])
			}
			for i := range sd.Methods().Len() {
				fmt.Fprintf(out, "%s\n", sd.Methods().Get(i).FullName())
			}
			return nil
		},
	}
	f.schemaFlags.add(cmd)
	f.dialFlags.add(cmd)
	return cmd
}

func newDescribeCmd() *cobra.Command {
	var f schemaCmdFlags
	cmd := &cobra.Command{
		Use:   "describe [flags] [TARGET] [SYMBOL...]",
		Short: "Describe a service, method, message or enum of a server or of .proto files",
		Long: `describe prints each symbol (package.Service, package.Service.Method,
package.Message, an enum or a field) as a .proto-like declaration; without a
symbol, it describes every service. The descriptors come from the reflection
service of the server at TARGET, or, with --proto, from the .proto files
(and then there is no TARGET).`,
		Example: `  rdmarpc describe tcp://127.0.0.1:7070 grpc.health.v1.Health
  rdmarpc describe -I examples/kvstore/kvpb --proto kv.proto rdmarpc.kvstore.v1.KV.Get`,
		RunE: func(cmd *cobra.Command, args []string) error {
			src, names, done, err := f.open(cmd, args)
			if err != nil {
				return err
			}
			defer done()
			if len(names) == 0 {
				if names, err = src.ListServices(cmd.Context()); err != nil {
					return err
				}
			}
			for _, n := range names {
				// "pkg.Service/Method", as call takes it, is a method too.
				d, err := src.FindSymbol(cmd.Context(), strings.ReplaceAll(strings.TrimPrefix(n, "/"), "/", "."))
				if err != nil {
					return err
				}
				fmt.Fprint(cmd.OutOrStdout(), dynamic.Describe(d))
			}
			return nil
		},
	}
	f.schemaFlags.add(cmd)
	f.dialFlags.add(cmd)
	return cmd
}

func init() { rootCmd.AddCommand(newListCmd(), newDescribeCmd()) }
