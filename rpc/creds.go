package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Creds makes the server secure every connection with c: TLS over TCP,
// TLS on the RDMA transport's bootstrap connection. Serve refuses a
// transport.Listener that was not created with credentials (rpc.Listen
// with ListenCreds); a net.Listener it secures itself.
func Creds(c credentials.TransportCredentials) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.creds = c })
}

// WithTransportCredentials makes the client secure its connections with c
// (credentials.NewTLS, insecure.NewCredentials()), as gRPC-go's. Without
// it connections are plaintext. A transport that cannot run credentials
// other than insecure ones fails the dial rather than dialling in
// plaintext.
func WithTransportCredentials(c credentials.TransportCredentials) DialOption {
	return func(o *dialOptions) { o.creds = c }
}

// WithPerRPCCredentials adds c's metadata (an authorization header) to
// every call of the client. Dial fails if c requires transport security
// and the client has no transport credentials other than insecure ones.
func WithPerRPCCredentials(c credentials.PerRPCCredentials) DialOption {
	return func(o *dialOptions) { o.perRPC = append(o.perRPC, c) }
}

// PerRPCCredentials adds c's metadata to this call. If c requires
// transport security and the connection is not PrivacyAndIntegrity, the
// call fails with Unauthenticated before anything is sent.
// Its result is a PerRPCCredsCallOption, which an interceptor can look for,
// as with gRPC-go's.
func PerRPCCredentials(c credentials.PerRPCCredentials) CallOption {
	return PerRPCCredsCallOption{Creds: c}
}

// PerRPCCredsCallOption is the call option PerRPCCredentials returns.
type PerRPCCredsCallOption struct {
	Creds credentials.PerRPCCredentials
}

func (o PerRPCCredsCallOption) apply(ci *callInfo) { ci.creds = append(ci.creds, o.Creds) }

// ListenCreds makes Listen secure every connection of the listener with c
// (see Creds), through the transport's transport.CredentialsListener.
func ListenCreds(c credentials.TransportCredentials) ListenOption {
	return func(o *listenOptions) { o.creds = c }
}

// secure reports whether c are credentials that do something (not nil,
// not insecure's).
func secure(c credentials.TransportCredentials) bool {
	return c != nil && c.Info().SecurityProtocol != "insecure"
}

// checkPerRPC refuses, at Dial, per-RPC credentials that require a secure
// transport the client does not have.
func checkPerRPC(o *dialOptions) error {
	for _, c := range o.perRPC {
		if c.RequireTransportSecurity() && !secure(o.creds) {
			return status.Error(codes.InvalidArgument, "rpc: the per-RPC credentials require transport security (use WithTransportCredentials with TLS)")
		}
	}
	return nil
}

// dial dials a with tr, through the client's transport credentials, which
// check the server's certificate against cc.authorityOf(a).
func (cc *ClientConn) dial(ctx context.Context, tr transport.Transport, a resolver.Address) (transport.Conn, error) {
	if !secure(cc.opts.creds) {
		return tr.Dial(ctx, a.Addr)
	}
	cd, ok := tr.(transport.CredentialsDialer)
	if !ok {
		return nil, fmt.Errorf("rpc: the transport %T cannot run transport credentials (%s)", tr, cc.opts.creds.Info().SecurityProtocol)
	}
	creds := cc.opts.creds
	if name := cc.authorityOf(a); name != a.Addr {
		creds = authorityCreds{creds, name}
	}
	return cd.DialWithCredentials(ctx, a.Addr, creds)
}

// authorityOf is the name of the server at a, as gRPC-go's: the
// address's ServerName, else the target's host when a resolver turned it
// into addresses (dns:///kv.prod:7070 dials an IP address, and the
// certificate names kv.prod), else the address.
func (cc *ClientConn) authorityOf(a resolver.Address) string {
	switch {
	case a.ServerName != "":
		return a.ServerName
	case cc.authority != "":
		return cc.authority
	}
	return a.Addr
}

// authorityCreds hand the transport's client handshake the authority
// rather than the address it dialed; a ServerName of the credentials' own
// (tls.Config.ServerName) still wins, as the handshake reads it first.
type authorityCreds struct {
	credentials.TransportCredentials
	authority string
}

func (c authorityCreds) ClientHandshake(ctx context.Context, _ string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, c.authority, raw)
}

// Authority is the name of the server the credentials verify, which a
// grpc:// connection also sends as its :authority.
func (c authorityCreds) Authority() string { return c.authority }

// WithNextProtos keeps the authority over credentials offering other
// application protocols (a grpc:// dial offers "h2").
func (c authorityCreds) WithNextProtos(protos ...string) credentials.TransportCredentials {
	if n, ok := c.TransportCredentials.(credentials.NextProtosCredentials); ok {
		return authorityCreds{n.WithNextProtos(protos...), c.authority}
	}
	return c
}

// callMD is md, the metadata a call sends, with what the per-RPC
// credentials of the client and of the call add. Their errors are the
// call's: a status error as it is, any other Unavailable, as gRPC-go.
func (l *clientLink) callMD(ctx context.Context, method string, md metadata.MD, ci *callInfo) (metadata.MD, error) {
	md = l.withUserAgent(md)
	if len(l.cc.opts.perRPC) == 0 && len(ci.creds) == 0 {
		return md, nil
	}
	ai := authInfo(l.Conn)
	for _, c := range ci.creds {
		if c.RequireTransportSecurity() {
			if err := credentials.CheckSecurityLevel(ai, credentials.PrivacyAndIntegrity); err != nil {
				return nil, status.ErrorWithCause(codes.Unauthenticated, "rpc: cannot send secure credentials on an insecure connection: "+err.Error(), err)
			}
		}
	}
	svc, _, _ := cutMethod(method)
	uri := "https://" + l.authority + "/" + svc
	ctx = credentials.NewContextWithRequestInfo(ctx, credentials.RequestInfo{Method: method, AuthInfo: ai})
	out := md.Copy() // md may be the client's shared user-agent
	for _, list := range [][]credentials.PerRPCCredentials{l.cc.opts.perRPC, ci.creds} {
		for _, c := range list {
			kv, err := c.GetRequestMetadata(ctx, uri)
			if err != nil {
				if _, ok := status.FromError(err); ok {
					return nil, err
				}
				return nil, status.ErrorWithCause(codes.Unavailable, "rpc: per-RPC credentials: "+err.Error(), err)
			}
			for k, v := range kv {
				out.Append(k, v)
			}
		}
	}
	return out, nil
}

// netListener serves nl with the TCP transport's framing, secured by the
// server's credentials.
func (s *Server) netListener(nl net.Listener) (transport.Listener, error) {
	tr, ok := transport.Lookup("tcp")
	if !ok {
		return nil, errors.New("rpc: Serve(net.Listener) needs the TCP transport: import _ \"github.com/rdmarpc/rdmarpc/transport/tcp\"")
	}
	st, ok := tr.(transport.StreamTransport)
	if !ok {
		return nil, fmt.Errorf("rpc: Serve(net.Listener): the transport registered for tcp (%T) cannot serve a net.Listener", tr)
	}
	return st.NewListener(nl, s.opts.creds), nil
}

// checkListener refuses a listener that does not run the server's
// credentials.
func (s *Server) checkListener(lis transport.Listener) error {
	if !secure(s.opts.creds) {
		return nil
	}
	if sl, ok := lis.(transport.SecuredListener); ok && sl.Credentials() != nil {
		return nil
	}
	return fmt.Errorf("rpc: the server has transport credentials (%s) but the listener on %v runs none: create it with rpc.Listen(target, rpc.ListenCreds(creds)), or Serve a net.Listener",
		s.opts.creds.Info().SecurityProtocol, lis.Addr())
}

// WithContextDialer makes the client dial with f, as gRPC-go's: the
// connections f returns (a unix socket, test/bufconn's in-memory ones, a
// proxy's) carry the TCP transport's framing, secured by the client's
// transport credentials when it has any. f gets the target's address
// part.
func WithContextDialer(f func(ctx context.Context, addr string) (net.Conn, error)) DialOption {
	return func(o *dialOptions) { o.contextDialer = f }
}

// dialerTransport dials with a WithContextDialer function and runs the TCP
// transport's handshake on what it returns.
type dialerTransport struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)
	st   transport.StreamTransport
}

func newDialerTransport(f func(context.Context, string) (net.Conn, error)) (*dialerTransport, error) {
	tr, ok := transport.Lookup("tcp")
	if !ok {
		return nil, errors.New("rpc: WithContextDialer needs the TCP transport: import _ \"github.com/rdmarpc/rdmarpc/transport/tcp\"")
	}
	st, ok := tr.(transport.StreamTransport)
	if !ok {
		return nil, fmt.Errorf("rpc: WithContextDialer: the transport registered for tcp (%T) cannot frame a net.Conn", tr)
	}
	return &dialerTransport{dial: f, st: st}, nil
}

func (d *dialerTransport) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	return d.DialWithCredentials(ctx, addr, nil)
}

func (d *dialerTransport) DialWithCredentials(ctx context.Context, addr string, creds credentials.TransportCredentials) (transport.Conn, error) {
	nc, err := d.dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c, err := d.st.NewClientConn(ctx, nc, addr, creds)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return c, nil
}

func (d *dialerTransport) Listen(string) (transport.Listener, error) {
	return nil, errors.New("rpc: a WithContextDialer transport does not listen")
}
