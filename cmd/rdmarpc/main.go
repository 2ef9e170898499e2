// Command rdmarpc is the project's tool: it lists RDMA devices and their
// counters, and generates stubs from .proto files without protoc. It must
// not depend on generated code, so that it can always regenerate it.
//
// Each subcommand lives in its own file and adds itself to the root command
// from init.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

var rootCmd = &cobra.Command{
	Use:           "rdmarpc",
	Short:         "rdmarpc: RPC over RDMA two-sided verbs, with a TCP fallback",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "rdmarpc:", err)
		os.Exit(1)
	}
}
