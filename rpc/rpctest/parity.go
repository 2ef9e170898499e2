package rpctest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
)

// parityKeys are the entries a handler finds in its incoming metadata that
// the client did not put there, as in gRPC-go.
var parityKeys = []string{":authority", "content-type", "user-agent"}

// withoutParityKeys drops the parityKeys' entries from "key=value" entries.
func withoutParityKeys(entries []string) []string {
	var out []string
	for _, e := range entries {
		k, _, _ := strings.Cut(e, "=")
		if !contains(parityKeys, k) {
			out = append(out, e)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkParity fails unless md, what a handler's context held, has the
// entries gRPC-go's server adds.
func checkParity(t *testing.T, what string, md metadata.MD, ok bool, ua string) {
	t.Helper()
	if !ok {
		t.Fatalf("%s: metadata.FromIncomingContext reported ok=false for a call without metadata", what)
	}
	if a := md.Get(":authority"); len(a) != 1 || a[0] == "" {
		t.Errorf("%s: :authority %q, want one non-empty value", what, a)
	}
	if ct := md.Get("content-type"); len(ct) != 1 || ct[0] != "application/grpc" {
		t.Errorf("%s: content-type %q, want application/grpc", what, ct)
	}
	if got := md.Get("user-agent"); len(got) != 1 || got[0] != ua {
		t.Errorf("%s: user-agent %q, want %q", what, got, ua)
	}
}

// testIncomingMetadata: a handler, unary or streaming, finds its metadata
// with ok=true even when the client sent none, with :authority,
// content-type and user-agent (WithUserAgent's prefix first), and the
// client's address in peer.FromContext.
func (s *suite) testIncomingMetadata(t *testing.T) {
	type seen struct {
		md   metadata.MD
		ok   bool
		peer *peer.Peer
	}
	var (
		mu            sync.Mutex
		unary, stream seen
	)
	e := s.start(t,
		rpc.UnaryInterceptor(func(ctx context.Context, req any, info *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
			md, ok := metadata.FromIncomingContext(ctx)
			p, _ := peer.FromContext(ctx)
			mu.Lock()
			unary = seen{md.Copy(), ok, p}
			mu.Unlock()
			return h(ctx, req)
		}),
		rpc.StreamInterceptor(func(srv any, ss rpc.ServerStream, info *rpc.StreamServerInfo, h rpc.StreamHandler) error {
			md, ok := metadata.FromIncomingContext(ss.Context())
			p, _ := peer.FromContext(ss.Context())
			mu.Lock()
			stream = seen{md.Copy(), ok, p}
			mu.Unlock()
			return h(srv, ss)
		}))
	for _, prefix := range []string{"", "kvctl/1.2"} {
		ua := "rdmarpc-go/" + rpc.Version
		opts := []rpc.DialOption{}
		if prefix != "" {
			ua = prefix + " " + ua
			opts = append(opts, rpc.WithUserAgent(prefix))
		}
		cc, c := s.dial(t, e, opts...)
		if _, err := c.Echo(s.ctx(t), &testpb.EchoRequest{}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		first := unary
		mu.Unlock()
		checkParity(t, "first unary", first.md, first.ok, ua)
		// The user-agent is the connection's: a later call has it too
		// (the client sends it until a call succeeded, the server
		// remembers it), and a caller's "user-agent" is not sent, as in
		// gRPC-go.
		ctx := metadata.AppendToOutgoingContext(s.ctx(t), "user-agent", "caller/0")
		if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
			t.Fatal(err)
		}
		st := s.openStream(t, s.ctx(t), cc, pingDesc, "Ping")
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := st.Recv(); err != nil {
				break
			}
		}
		mu.Lock()
		u, str := unary, stream
		mu.Unlock()
		checkParity(t, "unary", u.md, u.ok, ua)
		checkParity(t, "stream", str.md, str.ok, ua)
		for what, p := range map[string]*peer.Peer{"unary": u.peer, "stream": str.peer} {
			if p == nil || p.Addr == nil || p.LocalAddr == nil {
				t.Errorf("%s: peer.FromContext gave %+v, want the client's address", what, p)
			}
		}
	}
}

// authorize is the interceptor of gRPC-go's authentication example: no
// metadata is InvalidArgument, a wrong or missing token Unauthenticated.
func authorize(ctx context.Context, req any, info *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil, status.Error(codes.InvalidArgument, "missing metadata")
	}
	if a := md["authorization"]; len(a) == 0 || strings.TrimPrefix(a[0], "Bearer ") != "some-secret-token" {
		return nil, status.Error(codes.Unauthenticated, "invalid token")
	}
	return h(ctx, req)
}

// testAuthInterceptor: gRPC-go's token-checking interceptor answers a call
// without a token Unauthenticated (it answered InvalidArgument when a call
// without metadata reached the handler with none), and lets one with the
// token through.
func (s *suite) testAuthInterceptor(t *testing.T) {
	e := s.start(t, rpc.UnaryInterceptor(authorize))
	_, c := s.dial(t, e)
	_, err := c.Echo(s.ctx(t), &testpb.EchoRequest{})
	wantCode(t, "call without a token", err, codes.Unauthenticated, "invalid token")
	ctx := metadata.AppendToOutgoingContext(s.ctx(t), "authorization", "Bearer some-secret-token")
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatalf("call with the token: %v", err)
	}
}
