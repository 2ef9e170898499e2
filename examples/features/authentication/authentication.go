// Package authentication is gRPC-go's examples/features/authentication on
// rdmarpc: the client sends an OAuth2 token with every call (per-RPC
// credentials, over TLS only), the server's interceptor checks the
// authorization metadata and answers Unauthenticated without a valid
// token.
package authentication

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials/oauth"
	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

// The token the server accepts; a real server validates it with its
// identity provider.
const secretToken = "some-secret-token"

var (
	errMissingMetadata = status.Error(codes.InvalidArgument, "missing metadata")
	errInvalidToken    = status.Error(codes.Unauthenticated, "invalid token")
)

type echoServer struct{ echopb.UnimplementedEchoServer }

func (echoServer) Say(_ context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: in.Message}, nil
}

// valid reports whether the authorization metadata carries the token.
func valid(authorization []string) bool {
	if len(authorization) < 1 {
		return false
	}
	return strings.TrimPrefix(authorization[0], "Bearer ") == secretToken
}

// ensureValidToken runs the handler only for a call with a valid token.
func ensureValidToken(ctx context.Context, req any, _ *rpc.UnaryServerInfo, handler rpc.UnaryHandler) (any, error) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil, errMissingMetadata
	}
	if !valid(md["authorization"]) {
		return nil, errInvalidToken
	}
	return handler(ctx, req)
}

// Server serves Echo over TLS (--cert, --key) to callers with the token.
func Server(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50051", "where to listen")
	cert := fs.String("cert", "", "the server's certificate (PEM)")
	key := fs.String("key", "", "the server's key (PEM)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	creds, err := cli.ServerTLS(*cert, *key, "")
	if err != nil {
		return err
	}
	lis, err := cli.Listen(*addr, stdout, rpc.ListenCreds(creds))
	if err != nil {
		return err
	}
	s := rpc.NewServer(rpc.Creds(creds), rpc.UnaryInterceptor(ensureValidToken))
	echopb.RegisterEchoServer(s, echoServer{})
	return cli.Serve(ctx, s, lis)
}

// Client calls the server over TLS (checked against --ca) with --token as
// an OAuth2 bearer token; an empty --token sends none.
func Client(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50051", "the server")
	ca := fs.String("ca", "", "the CA that signs the server's certificate (PEM)")
	serverName := fs.String("server-name", "x.test.example.com", "the name the server's certificate must carry")
	token := fs.String("token", secretToken, "the OAuth2 access token; empty sends none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	creds, err := cli.ClientTLS(*ca, "", "", *serverName)
	if err != nil {
		return err
	}
	opts := []rpc.DialOption{rpc.WithTransportCredentials(creds)}
	if *token != "" {
		// oauth.TokenSource takes any token source, as with golang.org/x/oauth2.
		opts = append(opts, rpc.WithPerRPCCredentials(oauth.TokenSource{
			TokenSource: oauth.StaticSource(&oauth.Token{AccessToken: *token}),
		}))
	}
	cc, err := rpc.NewClient(*addr, opts...)
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
