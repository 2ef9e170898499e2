package peers

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	ghealth "google.golang.org/grpc/health/grpc_health_v1"
	ginterop "google.golang.org/grpc/interop"
	gtesting "google.golang.org/grpc/interop/grpc_testing"

	rcredentials "github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/rpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// selfSignedFiles writes selfSigned's certificate and key as PEM files in
// dir, for the server process.
func selfSignedFiles(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	cert, pool := selfSigned(t)
	kder, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pool
}

// TestServerTLSBothProtocols: with TLS credentials, gRPC-go's client
// (ALPN "h2") and rdmarpc's (ALPN "rdmarpc") are served on one port.
func TestServerTLSBothProtocols(t *testing.T) {
	certFile, keyFile, pool := selfSignedFiles(t, t.TempDir())
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
