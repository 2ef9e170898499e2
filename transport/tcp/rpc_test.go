package tcp

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/transport"

	"github.com/rdmarpc/rdmarpc/rpc/rpctest"
)

// TestRPC runs the RPC conformance suite over TCP.
func TestRPC(t *testing.T) {
	rpctest.Run(t, rpctest.Config{Transport: New(Options{}), Addr: "127.0.0.1:0"})
}

// TestRPCUnix runs it over unix sockets, the "unix" scheme's transport.
func TestRPCUnix(t *testing.T) {
	rpctest.Run(t, rpctest.Config{Transport: &freshPaths{Transport: NewUnix(Options{}), dir: t.TempDir()}, Addr: "rpc.sock"})
}

// freshPaths listens on a new socket path each time, as port 0 gives a new
// port: the suite runs servers side by side.
type freshPaths struct {
	*Transport
	dir string
	n   atomic.Int64
}

func (f *freshPaths) Listen(addr string) (transport.Listener, error) {
	if addr == "rpc.sock" { // the suite's "port 0"; a real path listens again there
		addr = filepath.Join(f.dir, fmt.Sprintf("%d.sock", f.n.Add(1)))
	}
	return f.Transport.Listen(addr)
}

// TestRPCTLS runs it over TLS: every server listens with server
// credentials, every client dials with client credentials.
func TestRPCTLS(t *testing.T) {
	srv, cli := testTLSConfigs(t)
	rpctest.Run(t, rpctest.Config{Transport: &tlsBoth{Transport: New(Options{}), server: credentials.NewTLS(srv), client: credentials.NewTLS(cli)}, Addr: "127.0.0.1:0"})
}

// tlsBoth listens and dials with TLS credentials of each side.
type tlsBoth struct {
	*Transport
	server, client credentials.TransportCredentials
}

func (b *tlsBoth) Listen(addr string) (transport.Listener, error) {
	return b.ListenWithCredentials(addr, b.server)
}

func (b *tlsBoth) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	return b.DialWithCredentials(ctx, addr, b.client)
}
