package authz_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/authz"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A policy in gRPC-go's example's shape, with a deny rule and wildcards.
const policy = `{
	"name": "authz",
	"deny_rules": [{"name": "deny_banned", "request": {"headers": [{"key": "X-Banned", "values": ["*"]}]}}],
	"allow_rules": [
		{"name": "allow_check", "request": {"paths": ["/grpc.health.v1.Health/Check"],
			"headers": [{"key": "UNARY_ECHO:W", "values": ["true"]}]}},
		{"name": "allow_list_prefix", "request": {"paths": ["/grpc.health.v1.Health/L*"]}},
		{"name": "allow_by_principal", "source": {"principals": ["spiffe://example.org/*", "*.trusted.example"]},
			"request": {"paths": ["/admin.Svc/*"]}}
	]
}`

// decide runs the static interceptor for a call of method with md as its
// incoming metadata and auth as its peer's credentials, and returns its
// code.
func decide(t *testing.T, i *authz.StaticInterceptor, method string, md metadata.MD, auth credentials.AuthInfo) codes.Code {
	t.Helper()
	ctx := metadata.NewIncomingContext(context.Background(), md)
	ctx = peer.NewContext(ctx, &peer.Peer{AuthInfo: auth})
	_, err := i.UnaryInterceptor(ctx, nil, &rpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return "ok", nil })
	ss := ctxStream{ctx}
	serr := i.StreamInterceptor(nil, ss, &rpc.StreamServerInfo{FullMethod: method}, func(any, rpc.ServerStream) error { return nil })
	if status.Code(err) != status.Code(serr) {
		t.Errorf("%s: unary %v, stream %v: the two interceptors disagree", method, err, serr)
	}
	if err != nil && status.Convert(err).Message() != "authz: unauthorized RPC request rejected" {
		t.Errorf("%s: %v", method, err)
	}
	return status.Code(err)
}

// ctxStream is a ServerStream with a context and nothing else.
type ctxStream struct{ ctx context.Context }

func (s ctxStream) Context() context.Context   { return s.ctx }
func (ctxStream) SetHeader(metadata.MD) error  { return nil }
func (ctxStream) SendHeader(metadata.MD) error { return nil }
func (ctxStream) SetTrailer(metadata.MD)       {}
func (ctxStream) SendMsg(any) error            { return nil }
func (ctxStream) RecvMsg(any) error            { return nil }

func tlsWith(cert *x509.Certificate) credentials.AuthInfo {
	ti := credentials.TLSInfo{}
	if cert != nil {
		ti.State = tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	}
	return ti
}

func TestStaticDecisions(t *testing.T) {
	i, err := authz.NewStatic(policy)
	if err != nil {
		t.Fatal(err)
	}
	spiffe, _ := url.Parse("spiffe://example.org/client")
	other, _ := url.Parse("spiffe://elsewhere.org/client")
	for _, c := range []struct {
		name   string
		method string
		md     metadata.MD
		auth   credentials.AuthInfo
		want   codes.Code
	}{
		{"header matches", "/grpc.health.v1.Health/Check", metadata.Pairs("unary_echo:w", "true"), nil, codes.OK},
		{"header value differs", "/grpc.health.v1.Health/Check", metadata.Pairs("unary_echo:w", "false"), nil, codes.PermissionDenied},
		{"header missing", "/grpc.health.v1.Health/Check", nil, nil, codes.PermissionDenied},
		{"path prefix", "/grpc.health.v1.Health/List", nil, nil, codes.OK},
		{"no rule", "/grpc.health.v1.Health/Watch", metadata.Pairs("unary_echo:w", "true"), nil, codes.PermissionDenied},
		{"deny wins", "/grpc.health.v1.Health/List", metadata.Pairs("x-banned", "yes"), nil, codes.PermissionDenied},
		{"URI SAN", "/admin.Svc/Drain", nil, tlsWith(&x509.Certificate{URIs: []*url.URL{spiffe}, DNSNames: []string{"a.trusted.example"}}), codes.OK},
		{"URI SAN elsewhere: DNS SANs not looked at", "/admin.Svc/Drain", nil, tlsWith(&x509.Certificate{URIs: []*url.URL{other}, DNSNames: []string{"a.trusted.example"}}), codes.PermissionDenied},
		{"DNS SAN suffix", "/admin.Svc/Drain", nil, tlsWith(&x509.Certificate{DNSNames: []string{"a.trusted.example"}}), codes.OK},
		{"subject only", "/admin.Svc/Drain", nil, tlsWith(&x509.Certificate{Subject: pkix.Name{CommonName: "x"}}), codes.PermissionDenied},
		{"TLS without a certificate", "/admin.Svc/Drain", nil, tlsWith(nil), codes.PermissionDenied},
		{"no TLS", "/admin.Svc/Drain", nil, nil, codes.PermissionDenied},
	} {
		if got := decide(t, i, c.method, c.md, c.auth); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestStaticInvalidPolicies(t *testing.T) {
	for _, c := range []struct{ policy, want string }{
		{`{`, "failed to unmarshal policy"},
		{`{"allow_rules": []}`, `"name" is not present`},
		{`{"name": "x"}`, `"allow_rules" is not present`},
		{`{"name": "x", "allow_rules": [{"request": {}}]}`, `"allow_rules" 0: "name" is not present`},
		{`{"name": "x", "allow_rules": [], "deny_rules": [{"name": "d", "request": {"headers": [{"key": ":path", "values": ["a"]}]}}]}`, `"deny_rules" 0: "headers" 0: unsupported "key" :path`},
		{`{"name": "x", "allow_rules": [{"name": "a", "request": {"headers": [{"key": "grpc-timeout", "values": ["1"]}]}}]}`, `unsupported "key" grpc-timeout`},
		{`{"name": "x", "allow_rules": [{"name": "a", "request": {"headers": [{"key": "Host", "values": ["h"]}]}}]}`, `unsupported "key" host`},
		{`{"name": "x", "allow_rules": [{"name": "a", "request": {"headers": [{"key": "k"}]}}]}`, `"values" is not present`},
		{`{"name": "x", "allow_rules": [{"name": "a", "request": {"headers": [{"values": ["v"]}]}}]}`, `"key" is not present`},
		{`{"name": "x", "allow_rules": [], "audit_logging_options": {"audit_condition": "SOMETIMES"}}`, "failed to parse AuditCondition"},
		{`{"name": "x", "allow_rules": [], "audit_logging_options": {"audit_loggers": [{"name": "stdout_logger"}]}}`, "audit loggers are not supported"},
	} {
		_, err := authz.NewStatic(c.policy)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.policy, err, c.want)
		}
	}
	// An empty allow list is a policy: it refuses everything.
	i, err := authz.NewStatic(`{"name": "x", "allow_rules": [], "audit_logging_options": {"audit_condition": "NONE"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := decide(t, i, "/a.B/C", nil, nil); got != codes.PermissionDenied {
		t.Errorf("empty allow_rules: %v, want PermissionDenied", got)
	}
}

// TestServerInterceptors: the interceptors on a server, health's Check
// allowed and Watch refused, over the pipe transport.
func TestServerInterceptors(t *testing.T) {
	i, err := authz.NewStatic(`{"name": "health", "allow_rules": [{"name": "check", "request": {"paths": ["/grpc.health.v1.Health/Check"]}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	tr := pipe.New(pipe.Options{})
	srv := rpc.NewServer(rpc.UnaryInterceptor(i.UnaryInterceptor), rpc.StreamInterceptor(i.StreamInterceptor))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := tr.Listen("authz:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc, err := rpc.Dial(ctx, lis.Addr().String(), rpc.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := healthpb.NewHealthClient(cc)
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("Check: %v", err)
	}
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Watch: %v, want PermissionDenied", err)
	}
}

// TestFileWatcher: the policy in force follows the file; a file that
// becomes invalid leaves the last good policy; Close stops the rereading.
func TestFileWatcher(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.json")
	write := func(p string) {
		if err := os.WriteFile(file+".new", []byte(p), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	allowA := `{"name": "p", "allow_rules": [{"name": "a", "request": {"paths": ["/s.S/A"]}}]}`
	allowB := `{"name": "p", "allow_rules": [{"name": "b", "request": {"paths": ["/s.S/B"]}}]}`
	if _, err := authz.NewFileWatcher(file, time.Millisecond); err == nil {
		t.Fatal("a missing file was taken")
	}
	write(allowA)
	w, err := authz.NewFileWatcher(file, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	allowed := func(method string) bool {
		_, err := w.UnaryInterceptor(context.Background(), nil, &rpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
		return err == nil
	}
	if !allowed("/s.S/A") || allowed("/s.S/B") {
		t.Fatal("the first policy is not in force")
	}
	write(allowB)
	for !allowed("/s.S/B") { // the test's timeout bounds the wait
		time.Sleep(time.Millisecond)
	}
	if allowed("/s.S/A") {
		t.Error("the old policy still allows A")
	}
	write("{not json")
	write(allowA) // the invalid one may or may not have been seen: A comes back
	for !allowed("/s.S/A") {
		time.Sleep(time.Millisecond)
	}
	w.Close()
	w.Close() // twice is fine
	write(allowB)
	if !allowed("/s.S/A") {
		t.Error("the policy changed after Close")
	}
}

// FuzzNewStatic: any policy text is parsed or refused without panicking,
// and a parsed one decides a call.
func FuzzNewStatic(f *testing.F) {
	f.Add(policy)
	f.Add(`{"name": "x", "allow_rules": [{"name": "a", "request": {"paths": ["*"], "headers": [{"key": "k", "values": ["*v", "v*", "*"]}]}}]}`)
	f.Add(`{"name": "x", "allow_rules": [], "audit_logging_options": {"audit_condition": "ON_DENY"}}`)
	f.Add(`{"name": "x", "allow_rules": [{"name": "a", "source": {"principals": ["", "*"]}}]}`)
	f.Fuzz(func(t *testing.T, p string) {
		i, err := authz.NewStatic(p)
		if err != nil {
			return
		}
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("k", "v"))
		_, _ = i.UnaryInterceptor(ctx, nil, &rpc.UnaryServerInfo{FullMethod: "/a.B/C"}, func(context.Context, any) (any, error) { return nil, nil })
	})
}
