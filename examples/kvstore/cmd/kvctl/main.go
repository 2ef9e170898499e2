package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvservice"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

func main() {
	// ^C cancels the command (bench stops and reports what it measured);
	// a second ^C kills.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli is one run of kvctl: its flags, streams and exit status.
type cli struct {
	addr    string
	timeout time.Duration
	json    bool

	stdin          io.Reader
	stdout, stderr io.Writer
	status         int
}

// exitError ends a command with an exit status, its message printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func usageError(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...)}
}

// run is kvctl's main, returning the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "kvctl",
		Short:         "Talk to the rdmarpc key-value store",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	defAddr := os.Getenv("KVCTL_ADDR")
	if defAddr == "" {
		defAddr = "tcp://127.0.0.1:7070"
	}
	pf := root.PersistentFlags()
	pf.StringVar(&c.addr, "addr", defAddr, "server target: tcp://HOST:PORT or rdma://HOST:PORT (env KVCTL_ADDR)")
	pf.DurationVar(&c.timeout, "timeout", 10*time.Second, "deadline of each command (bench: of each call)")
	pf.BoolVar(&c.json, "json", false, "print JSON instead of text")
	root.AddCommand(c.getCmd(), c.putCmd(), c.delCmd(), c.scanCmd(), c.batchCmd(), c.casCmd(), c.watchCmd(), c.benchCmd(), c.healthCmd())
	// Flag and argument errors from cobra are usage errors.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })

	err := root.Execute()
	if err == nil {
		return c.status
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.code == 2 {
			fmt.Fprintf(stderr, "kvctl: %v\nRun 'kvctl --help' for usage.\n", ee.err)
			return 2
		}
		err = ee.err
	} else if _, isStatus := status.FromError(err); !isStatus {
		// cobra's own complaints (unknown command, wrong arguments).
		fmt.Fprintf(stderr, "kvctl: %v\nRun 'kvctl --help' for usage.\n", err)
		return 2
	}
	c.printError(err)
	return 1
}

// dial connects to the server; the caller closes the connection.
func (c *cli) dial(ctx context.Context) (*rpc.ClientConn, kvpb.KVClient, error) {
	cc, err := rpc.Dial(ctx, c.addr)
	if err != nil {
		return nil, nil, err
	}
	return cc, kvpb.NewKVClient(cc), nil
}

// call runs fn with a client and the command's deadline.
func (c *cli) call(cmd *cobra.Command, fn func(ctx context.Context, kv kvpb.KVClient) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), c.timeout)
	defer cancel()
	cc, kv, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cc.Close()
	return fn(ctx, kv)
}

// printError prints a failed call's code and message.
func (c *cli) printError(err error) {
	st := status.Convert(err)
	conflict, isConflict := kvservice.Conflict(err)
	if c.json {
		e := map[string]any{"code": st.Code().String(), "code_number": uint32(st.Code()), "message": st.Message()}
		if isConflict {
			cur := map[string]any{"found": conflict.GetFound()}
			if conflict.GetFound() {
				putBytes(cur, "value", conflict.GetCurrent())
			}
			e["current"] = cur
		}
		c.printJSON(map[string]any{"error": e})
		return
	}
	fmt.Fprintf(c.stderr, "kvctl: %s: %s\n", st.Code(), st.Message())
	if isConflict {
		if conflict.GetFound() {
			fmt.Fprintf(c.stderr, "current value: %s\n", show(conflict.GetCurrent()))
		} else {
			fmt.Fprintln(c.stderr, "the key does not exist")
		}
	}
}

func (c *cli) printJSON(v any) {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// putBytes stores b in m as name, or as name_base64 when b is not UTF-8.
func putBytes(m map[string]any, name string, b []byte) {
	if utf8.Valid(b) {
		m[name] = string(b)
	} else {
		m[name+"_base64"] = base64.StdEncoding.EncodeToString(b)
	}
}

// show renders bytes for people: as they are when printable, else quoted.
func show(b []byte) string {
	s := string(b)
	if !utf8.ValidString(s) || s == "" {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// notFound is get's outcome for a missing key: exit status 1.
func notFound(key string) error {
	return &exitError{code: 1, err: status.Errorf(codes.NotFound, "key %s does not exist", show([]byte(key)))}
}
