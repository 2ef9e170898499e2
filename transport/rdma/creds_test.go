package rdma

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
	"io"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// testTLS returns mutual-TLS server credentials for ip and client
// credentials for a client named "alice", from a CA made for the test.
func testTLS(t *testing.T, ip string) (server, client credentials.TransportCredentials) {
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
	ca, _ := x509.ParseCertificate(caDER)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, IPAddresses: []net.IP{net.ParseIP(ip)},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	server = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{issue(2, "server", x509.ExtKeyUsageServerAuth)}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})
	client = credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{issue(3, "alice", x509.ExtKeyUsageClientAuth)}})
	return server, client
}

type whoami struct{ testpb.UnimplementedTestServer }

func (whoami) Echo(ctx context.Context, _ *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	p, _ := peer.FromContext(ctx)
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 {
		return nil, status.Errorf(codes.Unauthenticated, "no verified client certificate (%T)", p.AuthInfo)
	}
	return &testpb.EchoResponse{Payload: []byte(ti.State.VerifiedChains[0][0].Subject.CommonName)}, nil
}

// TestCredentials: over rdma:// with mutual TLS on the bootstrap, the
// handler reads the client's verified certificate; a plaintext client is
// refused and the listener goes on serving.
func TestCredentials(t *testing.T) {
	ip := guestIP(t)
	serverCreds, clientCreds := testTLS(t, ip)
	tr := New(Options{})
	lis, err := tr.ListenWithCredentials(net.JoinHostPort(ip, "0"), serverCreds)
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(rpc.Creds(serverCreds))
	testpb.RegisterTestServer(srv, whoami{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	target := "rdma://" + lis.Addr().String()

	if cc, err := rpc.Dial(ctx, target, rpc.WithTransport(tr)); err == nil {
		cc.Close()
		t.Fatal("a plaintext client was served by a TLS listener")
	} else if status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext client: %v, want Unavailable", err)
	} else {
		t.Logf("plaintext client refused: %v", err)
	}

	cc, err := rpc.Dial(ctx, target, rpc.WithTransport(tr), rpc.WithTransportCredentials(clientCreds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var p rpc.Peer
	resp, err := testpb.NewTestClient(cc).Echo(ctx, &testpb.EchoRequest{}, rpc.PeerOption(&p))
	if err != nil || string(resp.Payload) != "alice" {
		t.Fatalf("Echo over TLS-bootstrapped rdma: %q, %v; want alice", resp.GetPayload(), err)
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); !ok || !strings.Contains(ti.State.PeerCertificates[0].Subject.CommonName, "server") {
		t.Fatalf("the client's Peer.AuthInfo: %+v, want the server's certificate", p.AuthInfo)
	}
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	client, err = net.Dial("tcp", nl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = nl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// The server's side of the bootstrap's credentials, on a host without a
// device: a plaintext hello is refused with TLS's reason, a client that
// says nothing is given up after the handshake timeout, and the end of the
// listener's context ends the wait; a TLS client gets through with its
// certificate verified.
func TestServerCredentials(t *testing.T) {
	serverCreds, clientCreds := testTLS(t, "127.0.0.1")
	tr := New(Options{HandshakeTimeout: 200 * time.Millisecond})

	c, s := tcpPair(t)
	if _, err := c.Write(hello{qpn: 1}.encode()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.serverCredentials(context.Background(), s, serverCreds); err == nil || !strings.Contains(err.Error(), "does not look like a TLS handshake") {
		t.Fatalf("plaintext hello: %v, want TLS's refusal", err)
	}

	_, s = tcpPair(t)
	if _, _, err := tr.serverCredentials(context.Background(), s, serverCreds); !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("silent client: %v, want a protocol error after the handshake timeout", err)
	}

	_, s = tcpPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := (&Transport{o: Options{HandshakeTimeout: time.Hour}}).serverCredentials(ctx, s, serverCreds); err == nil {
		t.Fatal("a handshake under an ended context succeeded")
	}

	// The handshake that gets through has all the time it needs: 200 ms is
	// too short for TLS under -race in a loaded emulated guest (the server
	// gave up, the client read EOF).
	tr = New(Options{HandshakeTimeout: time.Minute})
	c, s = tcpPair(t)
	type result struct {
		ai  credentials.AuthInfo
		err error
	}
	got := make(chan result, 1)
	go func() {
		sec, ai, err := tr.serverCredentials(context.Background(), s, serverCreds)
		if err == nil {
			// The client reads before its handshake returns (TLS 1.3
			// sends the server's session tickets after the client's
			// Finished), so answer one byte.
			_, err = sec.Write([]byte{readyByte})
		}
		got <- result{ai, err}
	}()
	sec, _, err := clientCreds.ClientHandshake(context.Background(), "127.0.0.1:1", c)
	if err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if _, err := io.ReadFull(sec, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("server handshake: %v", r.err)
	}
	if ti, ok := r.ai.(credentials.TLSInfo); !ok || len(ti.State.VerifiedChains) == 0 || ti.State.VerifiedChains[0][0].Subject.CommonName != "alice" {
		t.Fatalf("server AuthInfo %+v, want alice's verified certificate", r.ai)
	}
}

// TestBindingRefusesWrongProof: a client that completes the TLS bootstrap
// and the hellos but whose first message on the queue pair is not the
// session's proof is refused by the server, which logs why and closes the
// connection; no connection reaches Accept.
func TestBindingRefusesWrongProof(t *testing.T) {
	ip := guestIP(t)
	serverCreds, clientCreds := testTLS(t, ip)
	core, logs := observer.New(zap.InfoLevel)
	srvTr := New(Options{Logger: zap.New(core)})
	lis, err := srvTr.ListenWithCredentials(net.JoinHostPort(ip, "0"), serverCreds)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	go func() {
		c, err := lis.Accept(ctx)
		if err == nil {
			c.Close()
			err = errors.New("a connection with a wrong proof was accepted")
		}
		accepted <- err
	}()

	cliTr := New(Options{})
	boot, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sec, _, err := clientCreds.ClientHandshake(ctx, lis.Addr().String(), boot)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cliTr.handshakeClient(ctx, sec, false)
	if err != nil {
		sec.Close()
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(ctx, make([]byte, proofLen)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the server kept the connection with a wrong proof")
	}
	for logs.FilterMessageSnippet("refused").Len() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("no refusal logged")
		case <-time.After(time.Millisecond):
		}
	}
	line := logs.FilterMessageSnippet("refused").All()[0]
	if !strings.Contains(fmt.Sprint(line.ContextMap()["error"]), "not this TLS session's proof") {
		t.Fatalf("refusal %v, want the wrong proof named", line.ContextMap())
	}
	cancel()
	if err := <-accepted; !errors.Is(err, context.Canceled) {
		t.Fatalf("Accept: %v", err)
	}
}
