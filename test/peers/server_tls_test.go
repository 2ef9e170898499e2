package peers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	ghealth "google.golang.org/grpc/health/grpc_health_v1"
	ginterop "google.golang.org/grpc/interop"
	gtesting "google.golang.org/grpc/interop/grpc_testing"

	rcredentials "github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/rpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files
// in dir, and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "peers"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestServerTLSBothProtocols: with TLS credentials, gRPC-go's client
// (ALPN "h2") and rdmarpc's (ALPN "rdmarpc") are served on one port.
func TestServerTLSBothProtocols(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	s := startServer(t, false, "-cert", certFile, "-key", keyFile)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()

	cc, err := grpc.NewClient(s.tcp, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	tc := gtesting.NewTestServiceClient(cc)
	ginterop.DoEmptyUnaryCall(ctx, tc)
	ginterop.DoLargeUnaryCall(ctx, tc)
	ginterop.DoPingPong(ctx, tc)
	r, err := ghealth.NewHealthClient(cc).Check(ctx, &ghealth.HealthCheckRequest{})
	if err != nil || r.GetStatus() != ghealth.HealthCheckResponse_SERVING {
		t.Fatalf("Check: %v, %v", r, err)
	}

	rc, err := rpc.NewClient("tcp://"+s.tcp, rpc.WithTransportCredentials(rcredentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := rc.Invoke(ctx, "/grpc.testing.TestService/EmptyCall", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
		t.Fatalf("rdmarpc client over TLS: %v", err)
	}
}
