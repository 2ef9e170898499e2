package peers

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/interop"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/security/advancedtls"
)

// TestClientAdvancedTLS: rdmarpc's advancedtls credentials on a grpc://
// client against gRPC-go's TLS server: they offer "h2" as gRPC-go
// requires (credentials.NextProtosCredentials), verify its certificate
// and the host, and run the custom check, which sees the authority.
func TestClientAdvancedTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	addr, _ := grpcgoServer(t, grpc.Creds(grpccreds.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	var seen string
	creds, err := advancedtls.NewClientCreds(&advancedtls.Options{
		RootOptions: advancedtls.RootCertificateOptions{RootCertificates: pool},
		AdditionalPeerVerification: func(info *advancedtls.HandshakeVerificationInfo) (*advancedtls.PostHandshakeVerificationResults, error) {
			seen = info.ServerName
			return &advancedtls.PostHandshakeVerificationResults{}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+addr, rpc.WithTransportCredentials(creds))))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	interop.DoLargeUnaryCall(ctx, tc)
	if seen != addr {
		t.Fatalf("the custom check saw server name %q, want %q", seen, addr)
	}
}
