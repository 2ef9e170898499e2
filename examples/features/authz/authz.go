// Package authz is gRPC-go's examples/features/authz on rdmarpc: the
// server authenticates the caller from its OAuth2 token (over TLS), gives
// the user's roles to the call as incoming metadata, and package authz's
// interceptors allow or refuse the call by a policy in gRPC's JSON format
// that names the method and the role it needs.
package authz

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rdmarpc/rdmarpc/authz"
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

// echoWriterRole is the role Say needs; policy allows Say to the callers
// that have it.
const (
	echoWriterRole = "ECHO:W"
	policy         = `{
		"name": "authz",
		"allow_rules": [{
			"name": "allow_Say",
			"request": {
				"paths": ["/rdmarpc.echo.v1.Echo/Say"],
				"headers": [{"key": "ECHO:W", "values": ["true"]}]
			}
		}],
		"deny_rules": []
	}`
)

// tokens are the users the server knows, by token: a real server asks its
// identity provider.
var tokens = map[string]string{"super-user-token": "super-user", "bad-actor-token": "bad-actor"}

type echoServer struct{ echopb.UnimplementedEchoServer }

func (echoServer) Say(_ context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: in.Message}, nil
}

// authenticate runs the handler with the caller's roles as its incoming
// metadata, for a call with a known token.
func authenticate(ctx context.Context, req any, _ *rpc.UnaryServerInfo, handler rpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var user string
	if v := md["authorization"]; len(v) > 0 {
		user = tokens[strings.TrimPrefix(v[0], "Bearer ")]
	}
	if user == "" {
		return nil, status.Error(codes.Unauthenticated, "invalid token")
	}
	roles := metadata.MD{}
	if user == "super-user" {
		roles.Set(echoWriterRole, "true")
	}
	return handler(metadata.NewIncomingContext(ctx, roles), req)
}

// Server serves Echo over TLS (--cert, --key), authenticating the caller
// and then authorizing the call by policy.
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
	static, err := authz.NewStatic(policy)
	if err != nil {
		return err
	}
	lis, err := cli.Listen(*addr, stdout, rpc.ListenCreds(creds))
	if err != nil {
		return err
	}
	s := rpc.NewServer(rpc.Creds(creds), rpc.ChainUnaryInterceptor(authenticate, static.UnaryInterceptor))
	echopb.RegisterEchoServer(s, echoServer{})
	return cli.Serve(ctx, s, lis)
}

// Client calls Say over TLS (checked against --ca) with --token.
func Client(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50051", "the server")
	ca := fs.String("ca", "", "the CA that signs the server's certificate (PEM)")
	serverName := fs.String("server-name", "x.test.example.com", "the name the server's certificate must carry")
	token := fs.String("token", "super-user-token", "the OAuth2 access token")
	if err := fs.Parse(args); err != nil {
		return err
	}
	creds, err := cli.ClientTLS(*ca, "", "", *serverName)
	if err != nil {
		return err
	}
	cc, err := rpc.NewClient(*addr, rpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer cc.Close()
	perRPC := rpc.PerRPCCredentials(oauth.TokenSource{TokenSource: oauth.StaticSource(&oauth.Token{AccessToken: *token})})
	r, err := echopb.NewEchoClient(cc).Say(ctx, &echopb.SayRequest{Message: "hello world"}, perRPC)
	if err != nil {
		return err // as it is, for status.Convert
	}
	fmt.Fprintln(stdout, "UnaryEcho:", r.Message)
	return nil
}
