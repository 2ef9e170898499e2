package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rdmarpc/rdmarpc/internal/dynamic"
)

func newListCmd() *cobra.Command {
	var sf schemaFlags
	cmd := &cobra.Command{
		Use:   "list [flags] [SERVICE]",
		Short: "List the services of .proto files, or the methods of one service",
		Long: `list prints the full names of the services the .proto files define (and
those they import), one a line; given a service, it prints its methods as
package.Service.Method, one a line.`,
		Example: `  rdmarpc list -I examples/kvstore/kvpb --proto kv.proto
  rdmarpc list -I examples/kvstore/kvpb --proto kv.proto rdmarpc.kvstore.v1.KV`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := sf.source(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(args) == 0 {
				names, err := src.ListServices(cmd.Context())
				if err != nil {
					return err
				}
				for _, n := range names {
					fmt.Fprintln(out, n)
				}
				return nil
			}
			d, err := src.FindSymbol(cmd.Context(), strings.TrimPrefix(args[0], "/"))
			if err != nil {
				return err
			}
			sd, ok := d.(protoreflect.ServiceDescriptor)
			if !ok {
				return fmt.Errorf("%s is not a service (describe it with rdmarpc describe)", args[0])
			}
			for i := range sd.Methods().Len() {
				fmt.Fprintf(out, "%s\n", sd.Methods().Get(i).FullName())
			}
			return nil
		},
	}
	sf.add(cmd)
	return cmd
}

func newDescribeCmd() *cobra.Command {
	var sf schemaFlags
	cmd := &cobra.Command{
		Use:   "describe [flags] [SYMBOL...]",
		Short: "Describe a service, method, message or enum of .proto files",
		Long: `describe prints each symbol (package.Service, package.Service.Method,
package.Message, an enum or a field) as a .proto-like declaration; without a
symbol, it describes every service.`,
		Example: `  rdmarpc describe -I examples/kvstore/kvpb --proto kv.proto rdmarpc.kvstore.v1.KV.Get`,
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := sf.source(cmd.Context())
			if err != nil {
				return err
			}
			names := args
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
	sf.add(cmd)
	return cmd
}

func init() { rootCmd.AddCommand(newListCmd(), newDescribeCmd()) }
