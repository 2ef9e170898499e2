// Package name_resolving is gRPC-go's examples/features/name_resolving on
// rdmarpc: the client calls the same server through passthrough:/// (the
// address as written) and through a resolver of its own, registered for
// the scheme "example" with resolver.Register, which maps a service name
// to the server's address.
package name_resolving

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/rpc"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

const (
	exampleScheme      = "example"
	exampleServiceName = "resolver.example.grpc.io"
)

type echoServer struct {
	echopb.UnimplementedEchoServer
	addr string
}

func (s *echoServer) Say(_ context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: fmt.Sprintf("%s (from %s)", in.Message, s.addr)}, nil
}

// Server serves Echo on --addr.
func Server(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50051", "where to listen")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lis, err := cli.Listen(*addr, stdout)
	if err != nil {
		return err
	}
	s := rpc.NewServer()
	echopb.RegisterEchoServer(s, &echoServer{addr: lis.Addr().String()})
	return cli.Serve(ctx, s, lis)
}

// exampleResolverBuilder resolves names of its table (service name to
// host:port), as a service registry would.
type exampleResolverBuilder struct {
	mu    sync.Mutex
	table map[string][]string
}

var builder = &exampleResolverBuilder{table: map[string][]string{}}

func init() { resolver.Register(builder) }

func (b *exampleResolverBuilder) set(name string, addrs ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.table[name] = addrs
}

func (*exampleResolverBuilder) Scheme() string { return exampleScheme }

func (b *exampleResolverBuilder) Build(t resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	b.mu.Lock()
	hosts := b.table[t.Endpoint()]
	b.mu.Unlock()
	if len(hosts) == 0 {
		return nil, fmt.Errorf("example resolver: no service %q", t.Endpoint())
	}
	addrs := make([]resolver.Address, len(hosts))
	for i, h := range hosts {
		addrs[i] = resolver.Address{Addr: h, Transport: t.Transport}
	}
	if err := cc.UpdateState(resolver.State{Addresses: addrs}); err != nil {
		return nil, err
	}
	return exampleResolver{}, nil
}

// exampleResolver has nothing to look up again: its table does not change.
type exampleResolver struct{}

func (exampleResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (exampleResolver) Close()                                {}

// Client calls the server --n times through passthrough:///, then --n
// times through example:///resolver.example.grpc.io.
func Client(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50051", "the server")
	n := fs.Int("n", 3, "calls per target")
	if err := fs.Parse(args); err != nil {
		return err
	}
	transport, host, ok := strings.Cut(*addr, "://")
	if !ok {
		transport, host = "tcp", *addr
	}
	builder.set(exampleServiceName, host)
	// transport+scheme: the resolver names the server, the prefix how to
	// reach it (docs/names-and-credentials.md).
	for _, target := range []string{
		transport + "+passthrough:///" + host,
		transport + "+" + exampleScheme + ":///" + exampleServiceName,
	} {
		if err := callTarget(ctx, target, *n, stdout); err != nil {
			return fmt.Errorf("%s: %w", target, err)
		}
	}
	return nil
}

func callTarget(ctx context.Context, target string, n int, stdout io.Writer) error {
	cc, err := rpc.NewClient(target)
	if err != nil {
		return err
	}
	defer cc.Close()
	fmt.Fprintf(stdout, "--- calling Echo.Say to %q ---\n", target)
	c := echopb.NewEchoClient(cc)
	for range n {
		r, err := c.Say(ctx, &echopb.SayRequest{Message: "this is examples/name_resolving"})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, r.Message)
	}
	return nil
}
