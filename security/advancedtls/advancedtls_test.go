package advancedtls_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/credentials/tls/certprovider"
	"github.com/rdmarpc/rdmarpc/credentials/tls/certprovider/pemfile"
	"github.com/rdmarpc/rdmarpc/internal/testpki"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/resolver/dns/dnstest"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/security/advancedtls"
	"github.com/rdmarpc/rdmarpc/status"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// whoService answers Echo with the common name of the client certificate
// the server verified.
type whoService struct{ testpb.UnimplementedTestServer }

func (whoService) Echo(ctx context.Context, _ *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	p, _ := peer.FromContext(ctx)
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 {
		return nil, status.Errorf(codes.Unauthenticated, "no verified client certificate in %#v", p.AuthInfo)
	}
	return &testpb.EchoResponse{Payload: []byte(ti.State.VerifiedChains[0][0].Subject.CommonName)}, nil
}

// serve serves whoService with creds over tcp:// and returns the address.
func serve(t *testing.T, creds credentials.TransportCredentials) string {
	t.Helper()
	return serveOn(t, "tcp://127.0.0.1:0", creds)
}

// serveOn serves whoService with creds on the listen URL and returns the
// address.
func serveOn(t *testing.T, url string, creds credentials.TransportCredentials) string {
	t.Helper()
	srv := rpc.NewServer(rpc.Creds(creds))
	testpb.RegisterTestServer(srv, whoService{})
	lis, err := rpc.Listen(url, rpc.ListenCreds(creds))
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
	return lis.Addr().String()
}

// call makes one Echo on a new connection (a new handshake) to
// tcp://addr and returns the name the server saw.
func call(t *testing.T, addr string, creds credentials.TransportCredentials) (string, error) {
	t.Helper()
	return callTarget(t, "tcp://"+addr, creds)
}

func callTarget(t *testing.T, target string, creds credentials.TransportCredentials) (string, error) {
	t.Helper()
	cc, err := rpc.NewClient(target, rpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := testpb.NewTestClient(cc).Echo(testCtx(t), &testpb.EchoRequest{})
	if err != nil {
		return "", err
	}
	return string(resp.Payload), nil
}

func provider(t *testing.T, o pemfile.Options) certprovider.Provider {
	t.Helper()
	p, err := pemfile.NewProvider(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// waitFor polls p until check accepts its key material: the provider's
// refresh has run. It fails at the test's hang guard, never on a deadline
// of its own.
func waitFor(t *testing.T, p certprovider.Provider, what string, check func(*certprovider.KeyMaterial) bool) {
	t.Helper()
	ctx := testCtx(t)
	for {
		km, err := p.KeyMaterial(ctx)
		if err == nil && check(km) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the provider never picked up %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestMutualTLSReloadsFiles: mutual TLS with pemfile providers on both
// sides over tcp://. A client certificate rewritten on disk is presented
// by the next connection; a client of another CA is refused until the
// server's root file is rewritten to trust that CA.
func TestMutualTLSReloadsFiles(t *testing.T) { mutualTLSReloadsFiles(t, "tcp", "127.0.0.1") }

// mutualTLSReloadsFiles is TestMutualTLSReloadsFiles over scheme:// at host.
func mutualTLSReloadsFiles(t *testing.T, scheme, host string) {
	ca1, ca2 := testpki.NewCA(t, "ca one"), testpki.NewCA(t, "ca two")
	srvLeaf := issue(t, ca1, "server", false)
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	testpki.WriteFile(t, path("server.pem"), srvLeaf.CertPEM)
	testpki.WriteFile(t, path("server.key"), srvLeaf.KeyPEM)
	testpki.WriteFile(t, path("roots.pem"), ca1.PEM)
	alice := issue(t, ca1, "alice", true)
	testpki.WriteFile(t, path("client.pem"), alice.CertPEM)
	testpki.WriteFile(t, path("client.key"), alice.KeyPEM)

	const refresh = 10 * time.Millisecond
	serverRoots := provider(t, pemfile.Options{RootFile: path("roots.pem"), RefreshDuration: refresh})
	server, err := advancedtls.NewServerCreds(&advancedtls.Options{
		IdentityOptions:   advancedtls.IdentityCertificateOptions{IdentityProvider: provider(t, pemfile.Options{CertFile: path("server.pem"), KeyFile: path("server.key"), RefreshDuration: refresh})},
		RootOptions:       advancedtls.RootCertificateOptions{RootProvider: serverRoots},
		RequireClientCert: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveOn(t, scheme+"://"+net.JoinHostPort(host, "0"), server)

	clientID := provider(t, pemfile.Options{CertFile: path("client.pem"), KeyFile: path("client.key"), RefreshDuration: refresh})
	client, err := advancedtls.NewClientCreds(&advancedtls.Options{
		IdentityOptions: advancedtls.IdentityCertificateOptions{IdentityProvider: clientID},
		RootOptions:     advancedtls.RootCertificateOptions{RootCertificates: ca1.Pool()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := callTarget(t, scheme+"://"+addr, client); err != nil || got != "alice" {
		t.Fatalf("first call: %q, %v; want alice", got, err)
	}

	bob := issue(t, ca1, "bob", true)
	testpki.WriteFile(t, path("client.key"), bob.KeyPEM)
	testpki.WriteFile(t, path("client.pem"), bob.CertPEM)
	waitFor(t, clientID, "bob's certificate", func(km *certprovider.KeyMaterial) bool {
		return len(km.Certs) == 1 && string(km.Certs[0].Certificate[0]) == string(bob.Cert.Raw)
	})
	if got, err := callTarget(t, scheme+"://"+addr, client); err != nil || got != "bob" {
		t.Fatalf("after the rewrite: %q, %v; want bob", got, err)
	}

	carol := issue(t, ca2, "carol", true)
	testpki.WriteFile(t, path("client.key"), carol.KeyPEM)
	testpki.WriteFile(t, path("client.pem"), carol.CertPEM)
	waitFor(t, clientID, "carol's certificate", func(km *certprovider.KeyMaterial) bool {
		return len(km.Certs) == 1 && string(km.Certs[0].Certificate[0]) == string(carol.Cert.Raw)
	})
	if got, err := callTarget(t, scheme+"://"+addr, client); status.Code(err) != codes.Unavailable {
		t.Fatalf("carol, of a CA the server does not trust: %q, %v; want Unavailable", got, err)
	}
	testpki.WriteFile(t, path("roots.pem"), append(append([]byte{}, ca1.PEM...), ca2.PEM...))
	waitFor(t, serverRoots, "the second CA", func(km *certprovider.KeyMaterial) bool {
		_, err := carol.Cert.Verify(x509.VerifyOptions{Roots: km.Roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err == nil
	})
	if got, err := callTarget(t, scheme+"://"+addr, client); err != nil || got != "carol" {
		t.Fatalf("once the server trusts carol's CA: %q, %v; want carol", got, err)
	}
}

// TestCustomVerification: AdditionalPeerVerification sees the authority the
// client dialed, port included, as gRPC-go's: the address of a tcp://
// target, the endpoint of a dns:/// one (not the IP address it resolved
// to, nor the host alone), and the server's verified certificate; when it
// refuses, the call fails Unavailable with its reason.
func TestCustomVerification(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	srv := issue(t, ca, "server", false)
	server, err := advancedtls.NewServerCreds(&advancedtls.Options{IdentityOptions: advancedtls.IdentityCertificateOptions{Certificates: []tls.Certificate{srv.TLS}}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, server)
	_, port, _ := strings.Cut(addr, ":")
	// localhost through the repository's DNS test server: a machine need
	// not resolve it (a fresh Debian root has no /etc/hosts).
	ns, err := dnstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ns.Set("localhost", netip.MustParseAddr("127.0.0.1"))
	for _, tc := range []struct {
		target, want string
		ok           bool
	}{
		{"tcp://" + addr, addr, true},
		{"dns://" + ns.Addr() + "/localhost:" + port, "localhost:" + port, true},
		{"tcp://" + addr, "ExampleDesignedToFail", false},
	} {
		var seen []string
		creds, err := advancedtls.NewClientCreds(&advancedtls.Options{
			RootOptions:      advancedtls.RootCertificateOptions{RootCertificates: ca.Pool()},
			VerificationType: advancedtls.CertVerification,
			AdditionalPeerVerification: func(info *advancedtls.HandshakeVerificationInfo) (*advancedtls.PostHandshakeVerificationResults, error) {
				seen = append(seen, fmt.Sprintf("%s %s %d", info.ServerName, info.Leaf.Subject.CommonName, len(info.VerifiedChains)))
				if info.ServerName != tc.want {
					return nil, fmt.Errorf("expected servername of %s, got %v", tc.want, info.ServerName)
				}
				return &advancedtls.PostHandshakeVerificationResults{}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = callTarget(t, tc.target, creds)
		// The server asks for no client certificate: the handler says so,
		// which shows that the call got through.
		if tc.ok && status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s, the check accepting %s: %v, want the handler's Unauthenticated", tc.target, tc.want, err)
		}
		if !tc.ok && (status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "expected servername of "+tc.want)) {
			t.Errorf("%s, the check refusing: %v, want Unavailable with its reason", tc.target, err)
		}
		if len(seen) == 0 || (tc.ok && seen[0] != tc.want+" server 1") {
			t.Errorf("%s: the check saw %q, want %q", tc.target, seen, tc.want+" server 1")
		}
	}
}

// TestRevocation: a server whose certificate the CA's CRL revokes is
// refused; an unrevoked one is accepted; with no CRL for the issuer the
// server is accepted unless DenyUndetermined. Both providers are used: the
// static one and the one reading a directory.
func TestRevocation(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	good, revoked := issue(t, ca, "good", false), issue(t, ca, "revoked", false)
	crlPEM := ca.CRL(t, revoked)
	dir := t.TempDir()
	testpki.WriteFile(t, filepath.Join(dir, "ca.crl"), crlPEM)
	testpki.WriteFile(t, filepath.Join(dir, "not-a-crl.pem"), ca.PEM) // skipped
	var failed []error
	watcher, err := advancedtls.NewFileWatcherCRLProvider(advancedtls.FileWatcherOptions{CRLDirectory: dir, CRLReloadingFailedCallback: func(err error) { failed = append(failed, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	if len(failed) != 1 {
		t.Errorf("the directory's non-CRL file made %d failures (%v), want 1", len(failed), failed)
	}
	serveLeaf := func(l *testpki.Leaf) string {
		creds, err := advancedtls.NewServerCreds(&advancedtls.Options{IdentityOptions: advancedtls.IdentityCertificateOptions{Certificates: []tls.Certificate{l.TLS}}})
		if err != nil {
			t.Fatal(err)
		}
		return serve(t, creds)
	}
	goodAddr, revokedAddr := serveLeaf(good), serveLeaf(revoked)
	for _, tc := range []struct {
		name     string
		provider advancedtls.CRLProvider
		deny     bool
		addr     string
		ok       bool
	}{
		{"static/good", advancedtls.NewStaticCRLProvider([][]byte{crlPEM}), false, goodAddr, true},
		{"static/revoked", advancedtls.NewStaticCRLProvider([][]byte{crlPEM}), false, revokedAddr, false},
		{"dir/good", watcher, true, goodAddr, true},
		{"dir/revoked", watcher, false, revokedAddr, false},
		{"none/undetermined", advancedtls.NewStaticCRLProvider(nil), false, revokedAddr, true},
		{"none/deny", advancedtls.NewStaticCRLProvider(nil), true, goodAddr, false},
	} {
		creds, err := advancedtls.NewClientCreds(&advancedtls.Options{
			RootOptions:       advancedtls.RootCertificateOptions{RootCertificates: ca.Pool()},
			RevocationOptions: &advancedtls.RevocationOptions{CRLProvider: tc.provider, DenyUndetermined: tc.deny},
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = call(t, tc.addr, creds)
		if got := status.Code(err) != codes.Unavailable; got != tc.ok {
			t.Errorf("%s: %v, want accepted=%v", tc.name, err, tc.ok)
		}
	}
}

// TestOptionsRefused: the combinations gRPC-go refuses are refused.
func TestOptionsRefused(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	id := advancedtls.IdentityCertificateOptions{Certificates: []tls.Certificate{issue(t, ca, "s", false).TLS}}
	for _, tc := range []struct {
		name   string
		client bool
		o      advancedtls.Options
	}{
		{"client skips verification with no custom check", true, advancedtls.Options{VerificationType: advancedtls.SkipVerification}},
		{"server requires client certs, skips verification, no custom check", false, advancedtls.Options{IdentityOptions: id, RequireClientCert: true, VerificationType: advancedtls.SkipVerification}},
		{"server without identity", false, advancedtls.Options{}},
		{"two root sources", true, advancedtls.Options{RootOptions: advancedtls.RootCertificateOptions{RootCertificates: ca.Pool(), GetRootCertificates: func(*advancedtls.ConnectionInfo) (*advancedtls.RootCertificates, error) { return nil, errors.New("no") }}}},
		{"min above max", true, advancedtls.Options{MinTLSVersion: 0x0304, MaxTLSVersion: 0x0303}},
	} {
		var err error
		if tc.client {
			_, err = advancedtls.NewClientCreds(&tc.o)
		} else {
			_, err = advancedtls.NewServerCreds(&tc.o)
		}
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
