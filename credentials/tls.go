package credentials

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"slices"
)

// ALPN is the application protocol rdmarpc's TLS credentials offer. A
// server offers HTTP/2's too ("h2", after its own), as it serves gRPC
// clients on the same port; a client offers only ALPN, so a server of
// another protocol refuses it in the handshake. A peer that offers none is
// accepted.
const ALPN = "rdmarpc"

// alpnH2 is HTTP/2's application protocol over TLS, which gRPC clients
// offer.
const alpnH2 = "h2"

// TLSInfo is the AuthInfo of a TLS connection.
type TLSInfo struct {
	// State is the verified connection state: PeerCertificates, and
	// VerifiedChains when the peer's certificate was checked against roots.
	State tls.ConnectionState
	CommonAuthInfo
}

// AuthType is "tls".
func (TLSInfo) AuthType() string { return "tls" }

type tlsCreds struct {
	config *tls.Config
	server *tls.Config // config, offering "h2" too: the server's handshakes
}

func newTLSCreds(cfg *tls.Config) *tlsCreds {
	server := cfg
	if !slices.Contains(cfg.NextProtos, alpnH2) {
		server = cfg.Clone()
		server.NextProtos = append(slices.Clone(cfg.NextProtos), alpnH2)
	}
	return &tlsCreds{config: cfg, server: server}
}

// NewTLS returns credentials from c, which it copies: a client's needs
// RootCAs (nil means the system's) and, for mutual TLS, Certificates; a
// server's needs Certificates and, for mutual TLS, ClientAuth and ClientCAs.
// TLS 1.2 is the least version unless c says otherwise; ALPN is offered.
func NewTLS(c *tls.Config) TransportCredentials {
	cfg := &tls.Config{}
	if c != nil {
		cfg = c.Clone()
	}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if !slices.Contains(cfg.NextProtos, ALPN) {
		cfg.NextProtos = append(slices.Clone(cfg.NextProtos), ALPN)
	}
	return newTLSCreds(cfg)
}

// NewClientTLSFromCert returns client credentials trusting the servers
// whose certificates cp verifies (nil: the system's roots). A non-empty
// serverNameOverride is checked against the certificate instead of the
// target's host.
func NewClientTLSFromCert(cp *x509.CertPool, serverNameOverride string) TransportCredentials {
	return NewTLS(&tls.Config{ServerName: serverNameOverride, RootCAs: cp})
}

// NewClientTLSFromFile is NewClientTLSFromCert with the PEM certificates
// in certFile as the roots.
func NewClientTLSFromFile(certFile, serverNameOverride string) (TransportCredentials, error) {
	b, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	cp := x509.NewCertPool()
	if !cp.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("credentials: no PEM certificate in %s", certFile)
	}
	return NewClientTLSFromCert(cp, serverNameOverride), nil
}

// NewServerTLSFromCert returns server credentials presenting cert.
func NewServerTLSFromCert(cert *tls.Certificate) TransportCredentials {
	return NewTLS(&tls.Config{Certificates: []tls.Certificate{*cert}})
}

// NewServerTLSFromFile returns server credentials presenting the PEM
// certificate chain in certFile with the key in keyFile.
func NewServerTLSFromFile(certFile, keyFile string) (TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	return NewServerTLSFromCert(&cert), nil
}

func (c *tlsCreds) ClientHandshake(ctx context.Context, authority string, rawConn net.Conn) (net.Conn, AuthInfo, error) {
	cfg := c.config
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		host, _, err := net.SplitHostPort(authority)
		if err != nil {
			host = authority // no port
		}
		cfg.ServerName = host
	}
	conn := tls.Client(rawConn, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("credentials: TLS handshake with %s: %w", authority, err)
	}
	return conn, TLSInfo{State: conn.ConnectionState(), CommonAuthInfo: CommonAuthInfo{SecurityLevel: PrivacyAndIntegrity}}, nil
}

func (c *tlsCreds) ServerHandshake(rawConn net.Conn) (net.Conn, AuthInfo, error) {
	conn := tls.Server(rawConn, c.server)
	if err := conn.Handshake(); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("credentials: TLS handshake from %s: %w", rawConn.RemoteAddr(), err)
	}
	return conn, TLSInfo{State: conn.ConnectionState(), CommonAuthInfo: CommonAuthInfo{SecurityLevel: PrivacyAndIntegrity}}, nil
}

func (c *tlsCreds) Info() ProtocolInfo {
	v := "1.2"
	if c.config.MinVersion >= tls.VersionTLS13 {
		v = "1.3"
	}
	return ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: v, ServerName: c.config.ServerName}
}

func (c *tlsCreds) Clone() TransportCredentials { return newTLSCreds(c.config.Clone()) }

func (c *tlsCreds) OverrideServerName(name string) error {
	c.config.ServerName = name
	c.server.ServerName = name
	return nil
}
