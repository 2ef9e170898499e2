package credentials_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/credentials/insecure"
	"github.com/rdmarpc/rdmarpc/internal/testpki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// result is one end's outcome of a handshake.
type result struct {
	conn net.Conn
	info credentials.AuthInfo
	err  error
}

// handshake connects a client and a server over loopback TCP and runs both
// handshakes; authority is what the client dials.
func handshake(t *testing.T, client, server credentials.TransportCredentials, authority string) (c, s result) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	done := make(chan result, 1)
	go func() {
		raw, err := lis.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		conn, info, err := server.ServerHandshake(raw)
		done <- result{conn, info, err}
	}()
	raw, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn, info, err := client.ClientHandshake(context.Background(), authority, raw)
	c = result{conn, info, err}
	s = <-done
	for _, r := range []result{c, s} {
		if r.conn != nil {
			t.Cleanup(func() { r.conn.Close() })
		}
	}
	return c, s
}

func serverCreds(t *testing.T, ca *testpki.CA, names ...string) credentials.TransportCredentials {
	l := ca.Issue(t, testpki.LeafOpts{CN: names[0], DNSNames: names})
	return credentials.NewServerTLSFromCert(&l.TLS)
}

func TestTLSHandshake(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	c, s := handshake(t, credentials.NewClientTLSFromCert(ca.Pool(), ""), serverCreds(t, ca, "kv.test"), "kv.test:7070")
	if c.err != nil || s.err != nil {
		t.Fatalf("handshake: client %v, server %v", c.err, s.err)
	}
	ci, ok := c.info.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("client AuthInfo is %T, want TLSInfo", c.info)
	}
	if ci.AuthType() != "tls" || ci.SecurityLevel != credentials.PrivacyAndIntegrity {
		t.Fatalf("client AuthInfo %s at %s", ci.AuthType(), ci.SecurityLevel)
	}
	// The AuthInfo carries the server's certificate, verified.
	if len(ci.State.PeerCertificates) == 0 || ci.State.PeerCertificates[0].Subject.CommonName != "kv.test" || len(ci.State.VerifiedChains) == 0 {
		t.Fatalf("client AuthInfo: peer certificates %v, verified chains %d", ci.State.PeerCertificates, len(ci.State.VerifiedChains))
	}
	if ci.State.NegotiatedProtocol != credentials.ALPN {
		t.Fatalf("negotiated protocol %q, want %q", ci.State.NegotiatedProtocol, credentials.ALPN)
	}
	// And the connections carry bytes.
	go c.conn.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s.conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// A client refuses a server whose certificate is wrong, and says why; the
// server's handshake fails too (issue 11 item 9).
func TestWrongServerCertificateIsRefused(t *testing.T) {
	trusted, other := testpki.NewCA(t, "trusted CA"), testpki.NewCA(t, "other CA")
	expired := trusted.Issue(t, testpki.LeafOpts{CN: "kv.test", DNSNames: []string{"kv.test"}, Expired: true})
	for _, tc := range []struct {
		name   string
		server credentials.TransportCredentials
		want   string
	}{
		{"unknown authority", serverCreds(t, other, "kv.test"), "certificate signed by unknown authority"},
		{"other name", serverCreds(t, trusted, "other.test"), "certificate is valid for other.test, not kv.test"},
		{"expired", credentials.NewServerTLSFromCert(&expired.TLS), "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := handshake(t, credentials.NewClientTLSFromCert(trusted.Pool(), ""), tc.server, "kv.test:7070")
			if c.err == nil || !strings.Contains(c.err.Error(), tc.want) || !strings.Contains(c.err.Error(), "TLS handshake with kv.test:7070") {
				t.Fatalf("client error %v, want one saying %q", c.err, tc.want)
			}
			if s.err == nil {
				t.Fatal("the server's handshake succeeded")
			}
		})
	}
}

// Plaintext against TLS fails on both sides with the reason.
func TestPlaintextAgainstTLSIsRefused(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	creds := serverCreds(t, ca, "kv.test")

	// A plaintext client talking to a TLS server.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() {
		raw, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		_, _, err = creds.ServerHandshake(raw)
		done <- err
	}()
	raw, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("RDMARPC hello, in the clear\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "does not look like a TLS handshake") {
		t.Fatalf("server error %v, want one saying the client does not speak TLS", err)
	}

	// A TLS client talking to a plaintext server.
	go func() {
		raw, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		defer raw.Close()
		_, err = raw.Write([]byte("RDMARPC hello, in the clear\n"))
		done <- err
	}()
	raw2, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = credentials.NewClientTLSFromCert(ca.Pool(), "").ClientHandshake(context.Background(), "kv.test:7070", raw2)
	if err == nil || !strings.Contains(err.Error(), "does not look like a TLS handshake") {
		t.Fatalf("client error %v, want one saying the server does not speak TLS", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Mutual TLS: the server verifies the client's certificate, refuses one it
// does not trust or a missing one, and its AuthInfo carries the verified
// client certificate.
func TestMutualTLS(t *testing.T) {
	serverCA, clientCA, strangerCA := testpki.NewCA(t, "server CA"), testpki.NewCA(t, "client CA"), testpki.NewCA(t, "stranger CA")
	srv := serverCA.Issue(t, testpki.LeafOpts{CN: "kv.test", DNSNames: []string{"kv.test"}})
	server := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{srv.TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCA.Pool(),
	})
	clientWith := func(l *testpki.Leaf) credentials.TransportCredentials {
		cfg := &tls.Config{RootCAs: serverCA.Pool()}
		if l != nil {
			// Present the certificate even when the server's list of
			// acceptable CAs does not name its issuer, as an intruder would.
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &l.TLS, nil }
		}
		return credentials.NewTLS(cfg)
	}

	t.Run("trusted", func(t *testing.T) {
		c, s := handshake(t, clientWith(clientCA.Issue(t, testpki.LeafOpts{CN: "client-1", Client: true})), server, "kv.test:7070")
		if c.err != nil || s.err != nil {
			t.Fatalf("client %v, server %v", c.err, s.err)
		}
		si := s.info.(credentials.TLSInfo)
		if len(si.State.VerifiedChains) == 0 || si.State.PeerCertificates[0].Subject.CommonName != "client-1" {
			t.Fatalf("server AuthInfo: peer %v, %d verified chains", si.State.PeerCertificates, len(si.State.VerifiedChains))
		}
	})
	for _, tc := range []struct {
		name   string
		client *testpki.Leaf
		want   string
	}{
		{"untrusted", strangerCA.Issue(t, testpki.LeafOpts{CN: "intruder", Client: true}), "certificate signed by unknown authority"},
		{"none", nil, "client didn't provide a certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := handshake(t, clientWith(tc.client), server, "kv.test:7070")
			if s.err == nil || !strings.Contains(s.err.Error(), tc.want) {
				t.Fatalf("server error %v, want one saying %q", s.err, tc.want)
			}
			// In TLS 1.3 the client finishes before the server judges its
			// certificate: the refusal reaches it as an alert on first read.
			err := c.err
			if err == nil {
				_, err = c.conn.Read(make([]byte, 1))
			}
			if err == nil || !strings.Contains(err.Error(), "remote error: tls") {
				t.Fatalf("client error %v, want the server's alert", err)
			}
		})
	}
}

func TestTLSFromFiles(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	l := ca.Issue(t, testpki.LeafOpts{CN: "kv.test", DNSNames: []string{"kv.test"}})
	server, err := credentials.NewServerTLSFromFile(writeFile(t, "cert.pem", l.CertPEM), writeFile(t, "key.pem", l.KeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	// The client dials an IP; the override is the name the certificate has.
	client, err := credentials.NewClientTLSFromFile(writeFile(t, "ca.pem", ca.PEM), "kv.test")
	if err != nil {
		t.Fatal(err)
	}
	if got := client.Info(); got.SecurityProtocol != "tls" || got.ServerName != "kv.test" {
		t.Fatalf("Info() = %+v", got)
	}
	if c, s := handshake(t, client, server, "127.0.0.1:7070"); c.err != nil || s.err != nil {
		t.Fatalf("client %v, server %v", c.err, s.err)
	}

	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"no CA file", func() error {
			_, err := credentials.NewClientTLSFromFile(t.TempDir()+"/missing.pem", "")
			return err
		}, "no such file"},
		{"no certificate in the CA file", func() error {
			_, err := credentials.NewClientTLSFromFile(writeFile(t, "junk.pem", []byte("not PEM")), "")
			return err
		}, "no PEM certificate"},
		{"key does not match", func() error {
			other := ca.Issue(t, testpki.LeafOpts{CN: "other"})
			_, err := credentials.NewServerTLSFromFile(writeFile(t, "c.pem", l.CertPEM), writeFile(t, "k.pem", other.KeyPEM))
			return err
		}, "private key does not match public key"},
	} {
		if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

func TestCloneAndOverrideServerName(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	orig := credentials.NewClientTLSFromCert(ca.Pool(), "")
	clone := orig.Clone()
	if err := clone.OverrideServerName("kv.test"); err != nil {
		t.Fatal(err)
	}
	if orig.Info().ServerName != "" || clone.Info().ServerName != "kv.test" {
		t.Fatalf("after overriding the clone: original %q, clone %q", orig.Info().ServerName, clone.Info().ServerName)
	}
	// The override is what the certificate is checked against.
	if c, s := handshake(t, clone, serverCreds(t, ca, "kv.test"), "10.1.2.3:7070"); c.err != nil || s.err != nil {
		t.Fatalf("client %v, server %v", c.err, s.err)
	}
	if c, _ := handshake(t, orig, serverCreds(t, ca, "kv.test"), "10.1.2.3:7070"); c.err == nil {
		t.Fatal("without the override, a certificate for kv.test was accepted for 10.1.2.3")
	}
}

// A client handshake gives up when its context ends, and closes the raw
// connection: the server sees it go.
func TestClientHandshakeHonoursContext(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		raw, err := lis.Accept()
		if err == nil {
			accepted <- raw
		}
	}()
	raw, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := credentials.NewClientTLSFromCert(ca.Pool(), "").ClientHandshake(ctx, "kv.test:7070", raw)
		done <- err
	}()
	srv := <-accepted // a server that never answers
	defer srv.Close()
	// Wait for the ClientHello, so the client is inside its handshake.
	if _, err := srv.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("handshake error %v, want context.Canceled", err)
	}
	if _, err := io.Copy(io.Discard, srv); err != nil {
		t.Fatalf("the raw connection was not closed cleanly: %v", err)
	}
}

// Both ends export the same keying material from one TLS session and other
// material from another: what the RDMA transport can use to bind a queue
// pair to the bootstrap connection that authenticated it.
func TestKeyingMaterialBindsTheSession(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	export := func(r result) []byte {
		st := r.info.(credentials.TLSInfo).State
		b, err := st.ExportKeyingMaterial("EXPORTER-rdmarpc-test", []byte("qp 17"), 32)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	client := credentials.NewClientTLSFromCert(ca.Pool(), "")
	server := serverCreds(t, ca, "kv.test")
	c1, s1 := handshake(t, client, server, "kv.test:7070")
	c2, _ := handshake(t, client, server, "kv.test:7070")
	if c1.err != nil || s1.err != nil || c2.err != nil {
		t.Fatal(c1.err, s1.err, c2.err)
	}
	if !bytes.Equal(export(c1), export(s1)) {
		t.Fatal("the two ends of one session export different material")
	}
	if bytes.Equal(export(c1), export(c2)) {
		t.Fatal("two sessions export the same material")
	}
}

// BenchmarkHandshake is the cost a connection's setup adds: a TLS 1.3
// handshake (ECDSA P-256) over loopback TCP, client and server, and the
// insecure one for comparison.
func BenchmarkHandshake(b *testing.B) {
	ca := testpki.NewCA(b, "bench CA")
	l := ca.Issue(b, testpki.LeafOpts{CN: "kv.test", DNSNames: []string{"kv.test"}})
	for _, tc := range []struct {
		name           string
		client, server credentials.TransportCredentials
	}{
		{"tls", credentials.NewClientTLSFromCert(ca.Pool(), ""), credentials.NewServerTLSFromCert(&l.TLS)},
		{"insecure", insecure.NewCredentials(), insecure.NewCredentials()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer lis.Close()
			go func() {
				for {
					raw, err := lis.Accept()
					if err != nil {
						return
					}
					if c, _, err := tc.server.ServerHandshake(raw); err == nil {
						c.Close()
					}
				}
			}()
			b.ReportAllocs()
			for b.Loop() {
				raw, err := net.Dial("tcp", lis.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				c, _, err := tc.client.ClientHandshake(context.Background(), "kv.test:7070", raw)
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// TestServerOffersH2: a server's credentials offer HTTP/2's ALPN after
// rdmarpc's, so a gRPC client (offering only "h2") is served on the same
// port, and an rdmarpc client still gets "rdmarpc"; a client's credentials
// offer only "rdmarpc".
func TestServerOffersH2(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	srv := serverCreds(t, ca, "kv.test")
	h2 := h2Client{&tls.Config{RootCAs: ca.Pool(), ServerName: "kv.test", NextProtos: []string{"h2"}}}
	for _, tc := range []struct {
		name   string
		client credentials.TransportCredentials
		want   string
	}{
		{"grpc client", h2, "h2"},
		{"rdmarpc client", credentials.NewClientTLSFromCert(ca.Pool(), ""), credentials.ALPN},
		{"rdmarpc client of a clone", credentials.NewClientTLSFromCert(ca.Pool(), "").Clone(), credentials.ALPN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := handshake(t, tc.client, srv.Clone(), "kv.test:7070")
			if c.err != nil || s.err != nil {
				t.Fatalf("handshake: client %v, server %v", c.err, s.err)
			}
			if got := s.info.(credentials.TLSInfo).State.NegotiatedProtocol; got != tc.want {
				t.Fatalf("negotiated %q, want %q", got, tc.want)
			}
		})
	}
}

// h2Client is a gRPC client's TLS: it offers only "h2".
type h2Client struct{ cfg *tls.Config }

func (h h2Client) ClientHandshake(ctx context.Context, _ string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c := tls.Client(raw, h.cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		return nil, nil, err
	}
	return c, credentials.TLSInfo{State: c.ConnectionState()}, nil
}
func (h h2Client) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("client only")
}
func (h h2Client) Info() credentials.ProtocolInfo          { return credentials.ProtocolInfo{} }
func (h h2Client) Clone() credentials.TransportCredentials { return h }
func (h h2Client) OverrideServerName(string) error         { return nil }
