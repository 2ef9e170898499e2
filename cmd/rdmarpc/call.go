package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/spf13/cobra"

	"github.com/rdmarpc/rdmarpc/internal/dynamic"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

type callFlags struct {
	schemaFlags
	dialFlags
	requestFlags
	timeout      time.Duration
	emitDefaults bool
	verbose      bool
}

func newCallCmd() *cobra.Command {
	var f callFlags
	cmd := &cobra.Command{
		Use:   "call [flags] TARGET METHOD",
		Short: "Call a method of a running server, with JSON in and out",
		Long: `call sends one request to METHOD (package.Service/Method or
package.Service.Method) of the server at TARGET (tcp://host:port,
rdma://host:port) and prints the response as JSON (protojson), on one line.
The request is JSON too: -d '{...}', -d @ to read it from stdin, -d @FILE
from a file; none sends the empty request.

Streaming methods print each response on its line as it arrives; a client
stream sends every JSON object of the input, in order, read as it is sent
(-d @ takes them from stdin, one a line), then half-closes. (An rdmarpc
built without the streaming runtime answers every stream with
Unimplemented, and call prints that.)

The schema comes from the server's reflection service
(grpc.reflection.v1, which rdmarpc's reflection.Register serves), or, with
--proto, from .proto files compiled in process (-I as protoc's).

A failed call prints its code, message and details (as JSON when their type
is known: google.rpc's error details and the .proto files' messages; type URL
otherwise) on stderr, and exits with 64 + the status code (grpcurl's
convention: 78 for Unavailable(14), 68 for DeadlineExceeded(4)), also when
the connection fails; a command line that cannot run (flags, arguments, a
target that does not parse) exits 2, any other failure (schema, JSON) 1.

-v prints the response headers and trailers on stderr ("(empty)" when there
are none), and how many requests were sent and responses received.`,
		Example: `  rdmarpc call -d '{"key": "Z3JlZXRpbmc="}' tcp://127.0.0.1:7070 rdmarpc.kvstore.v1.KV/Get

  rdmarpc call tcp://127.0.0.1:7070 grpc.health.v1.Health/Check

  rdmarpc call -I examples/kvstore/kvpb --proto kv.proto \
      -d '{"key": "Z3JlZXRpbmc="}' tcp://127.0.0.1:7070 rdmarpc.kvstore.v1.KV/Get

  echo '{"key": "Z3JlZXRpbmc="}' | rdmarpc call --proto kv.proto -d @ \
      -H 'request-id: 42' --timeout 2s rdma://10.0.0.1:7070 rdmarpc.kvstore.v1.KV/Get`,
		Args: nArgs(2, 2, "TARGET (tcp://host:port, rdma://host:port) and METHOD (package.Service/Method)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCall(cmd, f, args[0], args[1])
		},
	}
	f.schemaFlags.add(cmd)
	f.dialFlags.add(cmd)
	f.requestFlags.add(cmd)
	fl := cmd.Flags()
	fl.DurationVar(&f.timeout, "timeout", 0, "the call's deadline, sent to the server (0: none)")
	fl.BoolVar(&f.emitDefaults, "emit-defaults", false, "print fields that hold their default value too")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print the response headers and trailers, and what was sent and received, on stderr")
	return cmd
}

func init() { rootCmd.AddCommand(newCallCmd()) }

func runCall(cmd *cobra.Command, f callFlags, target, method string) error {
	if err := checkTarget(target); err != nil {
		return err
	}
	ctx := cmd.Context()
	// With --proto the request is checked before anything is dialled;
	// reflection needs the connection first.
	var cc *rpc.ClientConn
	defer func() {
		if cc != nil {
			cc.Close()
		}
	}()
	conn := func() (*rpc.ClientConn, error) {
		if cc == nil {
			c, err := f.dial(ctx, target, cmd.ErrOrStderr())
			if err != nil {
				return nil, &statusErr{err}
			}
			cc = c
		}
		return cc, nil
	}
	src, closeSrc, err := f.source(ctx, conn)
	if err != nil {
		var se *statusErr
		if errors.As(err, &se) {
			return rpcFailure(cmd.ErrOrStderr(), se.err, protoregistry.GlobalTypes)
		}
		return err
	}
	defer closeSrc()
	m, err := dynamic.FindMethod(ctx, src, method)
	if err != nil {
		return err
	}
	md, err := parseHeaders(f.headers)
	if err != nil {
		return &usageError{err}
	}
	in, closeIn, err := openData(f.data, cmd.InOrStdin())
	if err != nil {
		return err
	}
	defer closeIn()
	dec := dynamic.NewDecoder(in, m.Desc.Input(), src.Types())
	// A method that takes one request gets it checked before anything is
	// dialled; a client stream's requests are read as they are sent, so
	// that they can come from a terminal one line at a time.
	next := dec.Next
	if !m.Desc.IsStreamingClient() {
		req, err := dec.Next()
		if err != nil {
			return err
		}
		if _, err := dec.Next(); !errors.Is(err, io.EOF) {
			if err == nil {
				err = fmt.Errorf("%s takes one request, and the input holds more than one JSON object", m.FullMethod)
			}
			return err
		}
		next = once(req)
	}

	if _, err := conn(); err != nil {
		return rpcFailure(cmd.ErrOrStderr(), errors.Unwrap(err), src.Types())
	}
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	if len(md) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	enc := dynamic.NewEncoder(cmd.OutOrStdout(), src.Types(), f.emitDefaults)
	var x exchange
	if m.Streaming() {
		x, err = callStream(ctx, cc, m, next, enc)
	} else {
		req, _ := next()
		resp := newMessage(m.Desc.Output())
		x.sent = 1
		if err = cc.Invoke(ctx, m.FullMethod, req, resp, rpc.Header(&x.header), rpc.Trailer(&x.trailer)); err != nil {
			err = &statusErr{err}
		} else {
			x.received = 1
			err = enc.Encode(resp)
		}
	}
	if f.verbose {
		x.print(cmd.ErrOrStderr())
	}
	var se *statusErr
	if errors.As(err, &se) {
		return rpcFailure(cmd.ErrOrStderr(), se.err, src.Types())
	}
	return err
}

// once returns a source of msg alone.
func once(msg *dynamicpb.Message) func() (*dynamicpb.Message, error) {
	done := false
	return func() (*dynamicpb.Message, error) {
		if done {
			return nil, io.EOF
		}
		done = true
		return msg, nil
	}
}

// parseHeaders turns -H "key: value" flags into metadata.
func parseHeaders(hs []string) (metadata.MD, error) {
	md := metadata.MD{}
	for _, h := range hs {
		k, v, ok := strings.Cut(h, ":")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("-H %q: want key: value", h)
		}
		v = strings.TrimSpace(v)
		if strings.HasSuffix(strings.ToLower(k), "-bin") {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				if b, err = base64.RawStdEncoding.DecodeString(v); err != nil {
					return nil, fmt.Errorf("-H %q: a -bin key takes its value in base64: %v", h, err)
				}
			}
			v = string(b)
		}
		md.Append(k, v)
	}
	return md, nil
}

// openData returns where the request JSON comes from: -d's text, stdin
// (@) or a file (@FILE).
func openData(data string, stdin io.Reader) (io.Reader, func(), error) {
	switch {
	case data == "@":
		return stdin, func() {}, nil
	case strings.HasPrefix(data, "@"):
		fh, err := os.Open(data[1:])
		if err != nil {
			return nil, nil, fmt.Errorf("-d %s: %w", data, err)
		}
		return fh, func() { fh.Close() }, nil
	}
	return strings.NewReader(data), func() {}, nil
}

// exchange is what a call sent and received, which -v prints.
type exchange struct {
	header, trailer metadata.MD
	sent, received  int
}

// print writes the exchange as grpcurl -v does: the headers, the trailers
// ("(empty)" when there are none), and the counts.
func (x exchange) print(w io.Writer) {
	fmt.Fprintln(w, "Response headers received:")
	printMD(w, x.header)
	fmt.Fprintln(w, "\nResponse trailers received:")
	printMD(w, x.trailer)
	fmt.Fprintf(w, "Sent %s and received %s\n", plural(x.sent, "request"), plural(x.received, "response"))
}

func printMD(w io.Writer, md metadata.MD) {
	if len(md) == 0 {
		fmt.Fprintln(w, "(empty)")
		return
	}
	for _, k := range sortedKeys(md) {
		for _, v := range md[k] {
			if strings.HasSuffix(k, "-bin") {
				v = base64.StdEncoding.EncodeToString([]byte(v))
			}
			fmt.Fprintf(w, "%s: %s\n", k, v)
		}
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// exitError makes main exit with code, having printed nothing more: what
// failed is already on stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// rpcFailure prints a failed call's status on w and returns the error that
// makes main exit with 64 + its code.
func rpcFailure(w io.Writer, err error, types dynamic.Resolver) error {
	return &exitError{code: printStatus(w, err, types), err: err}
}

// printStatus prints a failed RPC's status, its details decoded with types,
// and returns its exit code, 64 + the status code.
func printStatus(w io.Writer, err error, types dynamic.Resolver) int {
	st := status.Convert(err)
	fmt.Fprintf(w, "ERROR:\n  Code: %s\n  Message: %s\n", st.Code(), st.Message())
	if ds := st.RawDetails(); len(ds) > 0 {
		fmt.Fprintln(w, "  Details:")
		for i, d := range ds {
			fmt.Fprintf(w, "  %d) %s\n", i+1, dynamic.Detail(d, types))
		}
	}
	return exitStatus + int(st.Code())
}

func newMessage(d protoreflect.MessageDescriptor) *dynamicpb.Message { return dynamicpb.NewMessage(d) }

func sortedKeys(md metadata.MD) []string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
