package peers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/interop"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// selfSigned makes a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "peers test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TLS with ALPN h2, as gRPC-go's server requires: rdmarpc's TLS
// credentials offer "h2" on a grpc:// dial; a TLS server that speaks no
// HTTP/2 is refused with a clear error.
func TestClientTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	addr, _ := grpcgoServer(t, grpc.Creds(grpccreds.NewServerTLSFromCert(&cert)))
	creds := credentials.NewClientTLSFromCert(pool, "")
	tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+addr, rpc.WithTransportCredentials(creds))))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	interop.DoLargeUnaryCall(ctx, tc)
	interop.DoPingPong(ctx, tc)

	// A TLS server without h2.
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	cc, err := rpc.NewClient("grpc://"+lis.Addr().String(), rpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	_, err = testpb.NewTestServiceClient(grpcgo.NewClient(cc)).EmptyCall(cctx, &testpb.Empty{})
	if err == nil || !(strings.Contains(err.Error(), "ALPN") || strings.Contains(err.Error(), "application protocol")) {
		t.Fatalf("a TLS server without h2: %v, want an error naming ALPN", err)
	}
}

// authorityService answers EmptyCall with the :authority it was called
// with, in a header.
type authorityService struct {
	testpb.UnimplementedTestServiceServer
}

func (authorityService) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	grpc.SetHeader(ctx, metadata.Pairs("authority", strings.Join(md.Get(":authority"), ",")))
	return &testpb.Empty{}, nil
}

// Over TLS, a target whose name a resolver turned into addresses sends
// that name as :authority, the name the certificate was checked for.
func TestClientTLSAuthority(t *testing.T) {
	cert, pool := selfSigned(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(grpccreds.NewServerTLSFromCert(&cert)))
	testpb.RegisterTestServiceServer(s, authorityService{})
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	defer func() { s.Stop(); <-done }()
	_, port, _ := net.SplitHostPort(lis.Addr().String())

	cc := rdmarpcClient(t, "grpc+dns:///localhost:"+port, rpc.WithTransportCredentials(credentials.NewClientTLSFromCert(pool, "")))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var header metadata.MD
	if _, err := testpb.NewTestServiceClient(grpcgo.NewClient(cc)).EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	// rdmarpc's authority is the name the TLS handshake verified: the host.
	if got := header.Get("authority"); len(got) != 1 || (got[0] != "localhost" && got[0] != "localhost:"+port) {
		t.Fatalf(":authority %q, want the target's name, localhost", got)
	}
}
