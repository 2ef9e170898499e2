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
