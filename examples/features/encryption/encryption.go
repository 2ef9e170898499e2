// Package encryption is gRPC-go's examples/features/encryption (TLS and
// mTLS) on rdmarpc: a server with a certificate, optionally requiring
// client certificates, and a client that verifies it. Over rdma:// the TLS
// session runs on the RDMA transport's bootstrap connection, and the queue
// pair is bound to it.
package encryption

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

type echoServer struct{ echopb.UnimplementedEchoServer }

// Say answers with the message and who the TLS session says called:
// the client certificate's common name under mutual TLS.
func (echoServer) Say(ctx context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, status.Errorf(codes.Unauthenticated, "not a TLS connection: %v", p.AuthInfo)
	}
	who := "an anonymous client"
	if certs := info.State.PeerCertificates; len(certs) > 0 {
		who = "client " + certs[0].Subject.CommonName
	}
	return &echopb.SayResponse{Message: fmt.Sprintf("%s (to %s over %s)", in.Message, who, info.SecurityLevel)}, nil
}

// Server serves Echo over TLS (--cert, --key), requiring client
// certificates signed by --client-ca when given (mutual TLS).
func Server(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50051", "where to listen")
	cert := fs.String("cert", "", "the server's certificate (PEM)")
	key := fs.String("key", "", "the server's key (PEM)")
	clientCA := fs.String("client-ca", "", "for mutual TLS: the CA that signs client certificates")
	if err := fs.Parse(args); err != nil {
		return err
	}
	creds, err := cli.ServerTLS(*cert, *key, *clientCA)
	if err != nil {
		return err
	}
	lis, err := cli.Listen(*addr, stdout, rpc.ListenCreds(creds))
	if err != nil {
		return err
	}
	s := rpc.NewServer(rpc.Creds(creds))
	echopb.RegisterEchoServer(s, echoServer{})
	return cli.Serve(ctx, s, lis)
}

// Client calls the server once over TLS, checking its certificate against
// --ca, with its own certificate (--cert, --key) for mutual TLS.
func Client(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50051", "the server")
	ca := fs.String("ca", "", "the CA that signs the server's certificate (PEM; system roots when empty)")
	cert := fs.String("cert", "", "for mutual TLS: the client's certificate (PEM)")
	key := fs.String("key", "", "for mutual TLS: the client's key (PEM)")
	serverName := fs.String("server-name", "x.test.example.com", "the name the server's certificate must carry")
	if err := fs.Parse(args); err != nil {
		return err
	}
	creds, err := cli.ClientTLS(*ca, *cert, *key, *serverName)
	if err != nil {
		return err
	}
	cc, err := rpc.NewClient(*addr, rpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer cc.Close()
	r, err := echopb.NewEchoClient(cc).Say(ctx, &echopb.SayRequest{Message: "hello world"})
	if err != nil {
		return err // as it is, for status.Convert
	}
	fmt.Fprintln(stdout, "UnaryEcho:", r.Message)
	return nil
}
