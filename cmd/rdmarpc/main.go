package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/rdmarpc/rdmarpc/status"
)

var rootCmd = &cobra.Command{
	Use:   "rdmarpc",
	Short: "rdmarpc: RPC over RDMA two-sided verbs, with a TCP fallback",
	Long: `rdmarpc: RPC over RDMA two-sided verbs, with a TCP fallback.

Exit status, the same for every command (as grpcurl's): 0 on success; 1 for
a local failure (a file, a .proto file, JSON that is not the request); 2 for
a command line that cannot run (a flag, the arguments, a target that does not
parse); 64 + the status code for an RPC that failed, whether the server
answered with the code or the connection failed (67 InvalidArgument, 68
DeadlineExceeded, 69 NotFound, 78 Unavailable).`,
	SilenceUsage:  true,
	SilenceErrors: true,
}

// The exit codes report gives (rootCmd's help and docs/cli.md say them).
const (
	exitFailure = 1  // a local failure
	exitUsage   = 2  // a command line that cannot run
	exitStatus  = 64 // plus the code of the failed RPC's status
)

func init() {
	rootCmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
}

func main() {
	// Ctrl-C cancels what runs: a call ends Canceled, a bench prints what
	// it measured so far.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	cmd, err := rootCmd.ExecuteContextC(ctx)
	stop()
	os.Exit(report(os.Stderr, cmd, err))
}

// report prints what err says, in the form its kind takes, and returns the
// exit code: every command's failures are reported here, one way.
func report(w io.Writer, cmd *cobra.Command, err error) int {
	var ee *exitError
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code // printed already (a call's status, with its details' types)
	case errors.As(err, &ue):
		fmt.Fprintf(w, "rdmarpc: %v\nUsage: %s\nRun '%s --help' for the flags and examples.\n", ue.err, cmd.UseLine(), cmd.CommandPath())
		return exitUsage
	}
	if _, ok := status.FromError(err); ok {
		return printStatus(w, err, protoregistry.GlobalTypes)
	}
	fmt.Fprintln(w, "rdmarpc:", err)
	return exitFailure
}

// usageError is a command line that cannot run: report prints it with the
// command's usage line and exits 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// nArgs accepts min to max arguments (max < 0: any number); other counts
// are a usage error that says what the command takes.
func nArgs(minN, maxN int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < minN || (maxN >= 0 && len(args) > maxN) {
			return &usageError{fmt.Errorf("%s takes %s; got %d argument(s)", cmd.Name(), what, len(args))}
		}
		return nil
	}
}
