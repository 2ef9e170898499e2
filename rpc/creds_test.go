package rpc_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/credentials/insecure"
	"github.com/rdmarpc/rdmarpc/credentials/oauth"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/resolver/dns/dnstest"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// testPKI is a CA made for one test and the server and client
// certificates it issued; no key is committed.
type testPKI struct {
	pool           *x509.CertPool
	server, client tls.Certificate
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			DNSNames: []string{cn}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p := &testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	p.server = issue(2, "kv.test", x509.ExtKeyUsageServerAuth)
	p.client = issue(3, "alice", x509.ExtKeyUsageClientAuth)
	return p
}

// mTLS is the server's credentials: its certificate, and client
// certificates required and checked against the CA.
func (p *testPKI) mTLS() credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{p.server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool})
}

// clientTLS is a client's credentials trusting the CA, with the client
// certificate when withCert.
func (p *testPKI) clientTLS(withCert bool) credentials.TransportCredentials {
	cfg := &tls.Config{RootCAs: p.pool, ServerName: "kv.test"}
	if withCert {
		cfg.Certificates = []tls.Certificate{p.client}
	}
	return credentials.NewTLS(cfg)
}

// whoService answers Echo with the caller's certificate name and the
// authorization it sent, as a handler reading who called would.
type whoService struct{ *gate }

func (*whoService) Echo(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no peer")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, status.Errorf(codes.Unauthenticated, "not TLS: %T", p.AuthInfo)
	}
	if len(ti.State.VerifiedChains) == 0 {
		return nil, status.Error(codes.Unauthenticated, "no verified client certificate")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	who := ti.State.VerifiedChains[0][0].Subject.CommonName + "|" + strings.Join(md.Get("authorization"), ",") + "|" + strings.Join(md.Get(":authority"), ",")
	return &testpb.EchoResponse{Payload: []byte(who)}, nil
}

// serveTLS serves whoService with creds, on a TCP socket handed to Serve
// as a net.Listener (as a gRPC-go program does) or, with url, on
// rpc.Listen("tcp://…", ListenCreds(creds)). It returns the address and
// the server's log.
func serveTLS(t *testing.T, creds credentials.TransportCredentials, url bool) (string, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	srv := rpc.NewServer(rpc.Creds(creds), rpc.Logger(zap.New(core)))
	testpb.RegisterTestServer(srv, &whoService{gate: newGate()})
	var lis rpc.Listener
	var err error
	if url {
		lis, err = rpc.Listen("tcp://127.0.0.1:0", rpc.ListenCreds(creds))
	} else {
		lis, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String(), logs
}

func dialTLS(t *testing.T, addr string, opts ...rpc.DialOption) (testpb.TestClient, error) {
	t.Helper()
	cc, err := rpc.Dial(testCtx(t), "tcp://"+addr, opts...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestClient(cc), nil
}

// TestMutualTLS: over mutual TLS a handler reads the client's verified
// certificate from peer.FromContext, and the client the server's from the
// Peer call option, whether the server serves a net.Listener or a
// transport listener made with ListenCreds.
func TestMutualTLS(t *testing.T) {
	pki := newPKI(t)
	for _, url := range []bool{false, true} {
		addr, _ := serveTLS(t, pki.mTLS(), url)
		c, err := dialTLS(t, addr, rpc.WithTransportCredentials(pki.clientTLS(true)))
		if err != nil {
			t.Fatalf("url=%v: Dial: %v", url, err)
		}
		var p rpc.Peer
		resp, err := c.Echo(testCtx(t), &testpb.EchoRequest{}, rpc.PeerOption(&p))
		if err != nil {
			t.Fatalf("url=%v: Echo: %v", url, err)
		}
		if got := string(resp.Payload); got != "alice||kv.test" {
			t.Errorf("url=%v: the handler saw %q, want the client certificate alice, no token, authority kv.test", url, got)
		}
		ti, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(ti.State.PeerCertificates) == 0 || ti.State.PeerCertificates[0].Subject.CommonName != "kv.test" || ti.SecurityLevel != credentials.PrivacyAndIntegrity {
			t.Errorf("url=%v: the client's Peer.AuthInfo is %+v, want TLS with the server's certificate", url, p.AuthInfo)
		}
	}
}

// TestTLSRefusals: a client without a certificate, a client that does not
// trust the server, and a plaintext client are each refused with
// Unavailable saying why, and the server goes on serving a good client.
func TestTLSRefusals(t *testing.T) {
	pki := newPKI(t)
	addr, logs := serveTLS(t, pki.mTLS(), false)
	other := newPKI(t)
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		want  string
	}{
		{"no client certificate", pki.clientTLS(false), "certificate required"},
		{"untrusted server", other.clientTLS(true), "certificate signed by unknown authority"},
		{"plaintext", nil, "does it require TLS?"},
	} {
		var opts []rpc.DialOption
		if tc.creds != nil {
			opts = append(opts, rpc.WithTransportCredentials(tc.creds))
		}
		_, err := dialTLS(t, addr, opts...)
		t.Logf("%s: %v", tc.name, err)
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Dial = %v, want Unavailable saying %q", tc.name, err, tc.want)
		}
	}
	c, err := dialTLS(t, addr, rpc.WithTransportCredentials(pki.clientTLS(true)))
	if err != nil {
		t.Fatalf("good client after refusals: %v", err)
	}
	if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{}); err != nil {
		t.Fatalf("good client after refusals: %v", err)
	}
	waitUntil(t, "the refusals in the server's log", func() bool { return logs.FilterMessage("refused connection").Len() >= 2 })
}

// TestServeRefusesUnsecuredListener: a server with credentials does not
// serve a transport listener made without them.
func TestServeRefusesUnsecuredListener(t *testing.T) {
	pki := newPKI(t)
	srv := rpc.NewServer(rpc.Creds(pki.mTLS()))
	lis, err := tcp.New(tcp.Options{}).Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(lis); err == nil || !strings.Contains(err.Error(), "runs none") {
		t.Fatalf("Serve = %v, want a refusal of the plaintext listener", err)
	}
	// Serve closed it.
	if _, err := lis.Accept(testCtx(t)); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Accept after the refusal: %v, want ErrClosed", err)
	}
}

// TestInsecureCredentials: insecure.NewCredentials(), which every ported
// gRPC-go program passes, works on any transport, here the pipe.
func TestInsecureCredentials(t *testing.T) {
	s := startServer(t, pipe.New(pipe.Options{}), newGate(), rpc.Creds(insecure.NewCredentials()))
	_, c := s.dial(t, rpc.WithTransportCredentials(insecure.NewCredentials()))
	if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
}

// TestPerRPCCredentials: an oauth token travels as "authorization: Bearer"
// over TLS, from the client's option or the call's; it is refused over a
// plaintext connection (at Dial for the client's, per call for the
// call's) unless the source allows it; an expired token fails the call
// with Unauthenticated before it leaves.
func TestPerRPCCredentials(t *testing.T) {
	pki := newPKI(t)
	addr, _ := serveTLS(t, pki.mTLS(), false)
	tok := oauth.NewOauthAccess(&oauth.Token{AccessToken: "s3cret"})
	c, err := dialTLS(t, addr, rpc.WithTransportCredentials(pki.clientTLS(true)), rpc.WithPerRPCCredentials(tok))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Echo(testCtx(t), &testpb.EchoRequest{})
	if err != nil || string(resp.Payload) != "alice|Bearer s3cret|kv.test" {
		t.Fatalf("Echo with the client's token: %q, %v", resp.GetPayload(), err)
	}
	c2, err := dialTLS(t, addr, rpc.WithTransportCredentials(pki.clientTLS(true)))
	if err != nil {
		t.Fatal(err)
	}
	call := oauth.NewOauthAccess(&oauth.Token{AccessToken: "per-call", TokenType: "bearer"})
	resp, err = c2.Echo(testCtx(t), &testpb.EchoRequest{}, rpc.PerRPCCredentials(call))
	if err != nil || string(resp.Payload) != "alice|Bearer per-call|kv.test" {
		t.Fatalf("Echo with the call's token: %q, %v", resp.GetPayload(), err)
	}
	expired := oauth.NewOauthAccess(&oauth.Token{AccessToken: "old", Expiry: time.Now().Add(-time.Minute)})
	_, err = c2.Echo(testCtx(t), &testpb.EchoRequest{}, rpc.PerRPCCredentials(expired))
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Echo with an expired token: %v, want Unauthenticated", err)
	}

	// Plaintext: the pipe.
	s := startServer(t, pipe.New(pipe.Options{}), &mdService{gate: newGate()})
	_, err = rpc.Dial(testCtx(t), "pipe://"+s.addr, rpc.WithTransport(s.tr), rpc.WithPerRPCCredentials(tok))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "transport security") {
		t.Fatalf("Dial with a token over plaintext: %v, want InvalidArgument", err)
	}
	_, pc := s.dial(t)
	_, err = pc.Echo(testCtx(t), &testpb.EchoRequest{}, rpc.PerRPCCredentials(tok))
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "insecure connection") {
		t.Fatalf("call with a token over plaintext: %v, want Unauthenticated", err)
	}
	allowed := oauth.TokenSource{TokenSource: oauth.StaticSource(&oauth.Token{AccessToken: "lab"}), AllowInsecure: true}
	var header metadata.MD
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "big", "-")
	if _, err := pc.Metadata(ctx, &testpb.MetadataRequest{}, rpc.PerRPCCredentials(allowed), rpc.Header(&header)); err != nil {
		t.Fatalf("call with an AllowInsecure token over plaintext: %v", err)
	}
}

// uriCreds send the URI they are asked about as the authorization, for a
// test to see what the client told them.
type uriCreds struct{}

func (uriCreds) GetRequestMetadata(_ context.Context, uri ...string) (map[string]string, error) {
	return map[string]string{"authorization": strings.Join(uri, ",")}, nil
}

func (uriCreds) RequireTransportSecurity() bool { return true }

// TestTLSChecksTargetHost: a dns:/// target resolves to IP addresses, but
// the TLS handshake checks the certificate against the target's host, and
// per-RPC credentials are told that host, as in gRPC-go; the client's TLS
// config names no server, so only the target can say kv.test.
func TestTLSChecksTargetHost(t *testing.T) {
	pki := newPKI(t)
	addr, _ := serveTLS(t, pki.mTLS(), false)
	_, port, _ := net.SplitHostPort(addr)
	ns, err := dnstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ns.Set("kv.test", netip.MustParseAddr("127.0.0.1"))
	noName := credentials.NewTLS(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}})
	target := fmt.Sprintf("tcp+dns://%s/kv.test:%s", ns.Addr(), port)
	cc, err := rpc.NewClient(target, rpc.WithTransportCredentials(noName), rpc.WithPerRPCCredentials(uriCreds{}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := testpb.NewTestClient(cc).Echo(testCtx(t), &testpb.EchoRequest{})
	want := "alice|https://kv.test:" + port + "/rdmarpc.test.v1.Test|kv.test"
	if err != nil || string(resp.Payload) != want {
		t.Fatalf("Echo: %q, %v; want %q", resp.GetPayload(), err, want)
	}
}
