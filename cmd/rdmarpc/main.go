package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
)

var rootCmd = &cobra.Command{
	Use:           "rdmarpc",
	Short:         "rdmarpc: RPC over RDMA two-sided verbs, with a TCP fallback",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	// Ctrl-C cancels what runs: a call ends Canceled, a bench prints what
	// it measured so far.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := rootCmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		// A failed call has printed its status already; it exits with
		// 64 + the code. Anything else exits 1.
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "rdmarpc:", err)
		os.Exit(1)
	}
}
