package advancedtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/credentials/tls/certprovider"
)

// CertificateChains are certificate chains, each from a leaf to a root.
type CertificateChains [][]*x509.Certificate

// HandshakeVerificationInfo is what a PostHandshakeVerificationFunc sees.
// Its fields are read-only.
type HandshakeVerificationInfo struct {
	// ServerName is, on a client, the authority it dialed
	// ("localhost:50051", port included, as in gRPC-go) or the name set to
	// override it; "" on a server.
	ServerName string
	// RawCerts are the certificates the peer sent.
	RawCerts [][]byte
	// VerifiedChains are the chains from the peer's certificate to a
	// trusted root, when its certificate was verified.
	VerifiedChains CertificateChains
	// Leaf is the peer's certificate when it was verified, else nil.
	Leaf *x509.Certificate
}

// PostHandshakeVerificationResults is what a successful
// PostHandshakeVerificationFunc returns; empty for now, as in gRPC-go.
type PostHandshakeVerificationResults struct{}

// PostHandshakeVerificationFunc is a check run after the certificate
// checks VerificationType asks for; an error refuses the peer.
type PostHandshakeVerificationFunc func(info *HandshakeVerificationInfo) (*PostHandshakeVerificationResults, error)

// ConnectionInfo is what GetRootCertificates sees.
type ConnectionInfo struct {
	// RawConn is the connection being secured.
	RawConn net.Conn
	// RawCerts are the certificates the peer sent.
	RawCerts [][]byte
}

// RootCertificates is what GetRootCertificates returns.
type RootCertificates struct {
	// TrustCerts are the trusted roots.
	TrustCerts *x509.CertPool
}

// RootCertificateOptions says where the trusted roots come from: at most
// one field; none means the system's roots.
type RootCertificateOptions struct {
	// RootCertificates are used for every handshake.
	RootCertificates *x509.CertPool
	// GetRootCertificates is asked on every handshake.
	GetRootCertificates func(params *ConnectionInfo) (*RootCertificates, error)
	// RootProvider's Roots are asked on every handshake.
	RootProvider certprovider.Provider
}

func (o RootCertificateOptions) count() int {
	return btoi(o.RootCertificates != nil) + btoi(o.GetRootCertificates != nil) + btoi(o.RootProvider != nil)
}

// IdentityCertificateOptions says where the local identity comes from: at
// most one field. A server needs one; a client only for mutual TLS.
type IdentityCertificateOptions struct {
	// Certificates are presented on every handshake.
	Certificates []tls.Certificate
	// GetIdentityCertificatesForClient is asked on every client handshake
	// the server requests a certificate in.
	GetIdentityCertificatesForClient func(*tls.CertificateRequestInfo) (*tls.Certificate, error)
	// GetIdentityCertificatesForServer is asked on every server handshake;
	// the first chain that suits the client's hello is presented.
	GetIdentityCertificatesForServer func(*tls.ClientHelloInfo) ([]*tls.Certificate, error)
	// IdentityProvider's Certs are asked on every handshake (a client's
	// provider must hold exactly one chain).
	IdentityProvider certprovider.Provider
}

func (o IdentityCertificateOptions) count() int {
	return btoi(o.Certificates != nil) + btoi(o.GetIdentityCertificatesForClient != nil) +
		btoi(o.GetIdentityCertificatesForServer != nil) + btoi(o.IdentityProvider != nil)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// VerificationType is how much of the peer's certificate is checked.
type VerificationType int

const (
	// CertAndHostVerification checks the certificate's chain to a trusted
	// root and, on a client, that it names the host dialed.
	CertAndHostVerification VerificationType = iota
	// CertVerification checks the chain only: without an
	// AdditionalPeerVerification that checks the identity, any holder of
	// a certificate from the roots can stand in for the server.
	CertVerification
	// SkipVerification checks nothing; AdditionalPeerVerification must
	// then be set.
	SkipVerification
)

// Options configure credentials of either side.
type Options struct {
	// IdentityOptions: the server's certificate (required), the client's
	// for mutual TLS.
	IdentityOptions IdentityCertificateOptions
	// AdditionalPeerVerification, when set, runs after the checks of
	// VerificationType and may refuse the peer.
	AdditionalPeerVerification PostHandshakeVerificationFunc
	// RootOptions verify the peer: the client's always, the server's when
	// RequireClientCert.
	RootOptions RootCertificateOptions
	// RequireClientCert (server only) asks the client for a certificate
	// and refuses a client without one.
	RequireClientCert bool
	// VerificationType: CertAndHostVerification by default.
	VerificationType VerificationType
	// RevocationOptions, when set, check the peer's chain against CRLs.
	RevocationOptions *RevocationOptions
	// MinTLSVersion is the least TLS version accepted; TLS 1.2 by default.
	MinTLSVersion uint16
	// MaxTLSVersion is the greatest; TLS 1.3 by default.
	MaxTLSVersion uint16
	// CipherSuites are the TLS 1.0-1.2 cipher suites; nil: Go's defaults.
	CipherSuites []uint16
}

// side is what one end's handshakes need beyond the tls.Config.
type side struct {
	client       bool
	verification VerificationType
	roots        func(ctx context.Context, ci *ConnectionInfo) (*x509.CertPool, error) // nil: the config's
	verify       PostHandshakeVerificationFunc
	revocation   *RevocationOptions
}

func (o *Options) common(client bool) (*tls.Config, side, error) {
	s := side{client: client, verification: o.VerificationType, verify: o.AdditionalPeerVerification, revocation: o.RevocationOptions}
	if o.VerificationType < CertAndHostVerification || o.VerificationType > SkipVerification {
		return nil, s, fmt.Errorf("advancedtls: unknown VerificationType %d", o.VerificationType)
	}
	if o.RootOptions.count() > 1 {
		return nil, s, errors.New("advancedtls: at most one field in RootCertificateOptions could be specified")
	}
	if o.IdentityOptions.count() > 1 {
		return nil, s, errors.New("advancedtls: at most one field in IdentityCertificateOptions could be specified")
	}
	cfg := &tls.Config{MinVersion: o.MinTLSVersion, MaxVersion: o.MaxTLSVersion, CipherSuites: o.CipherSuites}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if cfg.MaxVersion == 0 {
		cfg.MaxVersion = tls.VersionTLS13
	}
	if cfg.MinVersion > cfg.MaxVersion {
		return nil, s, errors.New("advancedtls: the minimum TLS version is larger than the maximum TLS version")
	}
	switch ro := o.RootOptions; {
	case ro.RootCertificates != nil:
		pool := ro.RootCertificates
		s.roots = func(context.Context, *ConnectionInfo) (*x509.CertPool, error) { return pool, nil }
	case ro.GetRootCertificates != nil:
		get := ro.GetRootCertificates
		s.roots = func(_ context.Context, ci *ConnectionInfo) (*x509.CertPool, error) {
			r, err := get(ci)
			if err != nil {
				return nil, err
			}
			if r == nil {
				return nil, errors.New("advancedtls: GetRootCertificates returned no roots")
			}
			return r.TrustCerts, nil
		}
	case ro.RootProvider != nil:
		p := ro.RootProvider
		s.roots = func(ctx context.Context, _ *ConnectionInfo) (*x509.CertPool, error) {
			km, err := p.KeyMaterial(ctx)
			if err != nil {
				return nil, err
			}
			return km.Roots, nil
		}
	default:
		// The system's roots, when the peer is verified at all: always
		// on a client, on a server only when it asks for certificates.
		if o.VerificationType != SkipVerification && (client || o.RequireClientCert) {
			pool, err := x509.SystemCertPool()
			if err != nil {
				return nil, s, fmt.Errorf("advancedtls: the system's roots: %w", err)
			}
			s.roots = func(context.Context, *ConnectionInfo) (*x509.CertPool, error) { return pool, nil }
		}
	}
	return cfg, s, nil
}

func (o *Options) clientConfig() (*tls.Config, side, error) {
	cfg, s, err := o.common(true)
	if err != nil {
		return nil, s, err
	}
	if o.VerificationType == SkipVerification && o.AdditionalPeerVerification == nil {
		return nil, s, errors.New("advancedtls: client needs to provide custom verification mechanism if choose to skip default verification")
	}
	if o.IdentityOptions.GetIdentityCertificatesForServer != nil {
		return nil, s, errors.New("advancedtls: GetIdentityCertificatesForServer cannot be specified on the client side")
	}
	// Go's own checks are off: verifyPeer does them with the roots of the
	// moment (a reloaded CA), then the revocation and custom checks.
	cfg.InsecureSkipVerify = true
	switch io := o.IdentityOptions; {
	case io.Certificates != nil:
		cfg.Certificates = io.Certificates
	case io.GetIdentityCertificatesForClient != nil:
		cfg.GetClientCertificate = io.GetIdentityCertificatesForClient
	case io.IdentityProvider != nil:
		p := io.IdentityProvider
		cfg.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			km, err := p.KeyMaterial(cri.Context())
			if err != nil {
				return nil, err
			}
			if len(km.Certs) != 1 {
				return nil, fmt.Errorf("advancedtls: the client's IdentityProvider holds %d certificate chains, want 1", len(km.Certs))
			}
			return &km.Certs[0], nil
		}
	}
	return cfg, s, nil
}

func (o *Options) serverConfig() (*tls.Config, side, error) {
	cfg, s, err := o.common(false)
	if err != nil {
		return nil, s, err
	}
	if o.RequireClientCert && o.VerificationType == SkipVerification && o.AdditionalPeerVerification == nil {
		return nil, s, errors.New("advancedtls: server needs to provide custom verification mechanism if choose to skip default verification, but require client certificate(s)")
	}
	if o.IdentityOptions.GetIdentityCertificatesForClient != nil {
		return nil, s, errors.New("advancedtls: GetIdentityCertificatesForClient cannot be specified on the server side")
	}
	if o.RequireClientCert {
		// Go verifies nothing with RequireAnyClientCert: verifyPeer does.
		cfg.ClientAuth = tls.RequireAnyClientCert
	}
	var chains func(*tls.ClientHelloInfo) ([]*tls.Certificate, error)
	switch io := o.IdentityOptions; {
	case io.Certificates != nil:
		cfg.Certificates = io.Certificates
	case io.GetIdentityCertificatesForServer != nil:
		chains = io.GetIdentityCertificatesForServer
	case io.IdentityProvider != nil:
		p := io.IdentityProvider
		chains = func(hello *tls.ClientHelloInfo) ([]*tls.Certificate, error) {
			km, err := p.KeyMaterial(hello.Context())
			if err != nil {
				return nil, err
			}
			out := make([]*tls.Certificate, len(km.Certs))
			for i := range km.Certs {
				out[i] = &km.Certs[i]
			}
			return out, nil
		}
	default:
		return nil, s, errors.New("advancedtls: needs to specify at least one field in IdentityCertificateOptions")
	}
	if chains != nil {
		cfg.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			certs, err := chains(hello)
			if err != nil {
				return nil, err
			}
			return pickCertificate(hello, certs)
		}
	}
	return cfg, s, nil
}

// pickCertificate returns the first of certs that suits the client's hello
// (its server name, signature schemes, curves), else the first.
func pickCertificate(hello *tls.ClientHelloInfo, certs []*tls.Certificate) (*tls.Certificate, error) {
	if len(certs) == 0 {
		return nil, errors.New("advancedtls: no identity certificate to present")
	}
	if len(certs) > 1 {
		for _, c := range certs {
			if hello.SupportsCertificate(c) == nil {
				return c, nil
			}
		}
	}
	return certs[0], nil
}

// creds are the TransportCredentials: each handshake is credentials.NewTLS's
// over a copy of config whose VerifyPeerCertificate is verifyPeer for that
// connection.
type creds struct {
	config     *tls.Config
	side       side
	nextProtos []string // set by WithNextProtos: offered instead of the defaults
}

// NewClientCreds returns client credentials configured by o.
func NewClientCreds(o *Options) (credentials.TransportCredentials, error) {
	if o == nil {
		return nil, errors.New("advancedtls: nil Options")
	}
	cfg, s, err := o.clientConfig()
	if err != nil {
		return nil, err
	}
	return &creds{config: cfg, side: s}, nil
}

// NewServerCreds returns server credentials configured by o.
func NewServerCreds(o *Options) (credentials.TransportCredentials, error) {
	if o == nil {
		return nil, errors.New("advancedtls: nil Options")
	}
	cfg, s, err := o.serverConfig()
	if err != nil {
		return nil, err
	}
	return &creds{config: cfg, side: s}, nil
}

func (c *creds) tls(cfg *tls.Config) credentials.TransportCredentials {
	tc := credentials.NewTLS(cfg)
	if c.nextProtos != nil {
		if np, ok := tc.(credentials.NextProtosCredentials); ok {
			tc = np.WithNextProtos(c.nextProtos...)
		}
	}
	return tc
}

func (c *creds) ClientHandshake(ctx context.Context, authority string, rawConn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg := c.config.Clone()
	name := cfg.ServerName
	if name == "" {
		name = authority
	}
	var chains CertificateChains
	cfg.VerifyPeerCertificate = c.side.verifyPeer(ctx, name, rawConn, &chains)
	conn, ai, err := c.tls(cfg).ClientHandshake(ctx, authority, rawConn)
	if err != nil {
		return nil, nil, err
	}
	return conn, withChains(ai, chains), nil
}

func (c *creds) ServerHandshake(rawConn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg := c.config.Clone()
	var chains CertificateChains
	cfg.VerifyPeerCertificate = c.side.verifyPeer(context.Background(), "", rawConn, &chains)
	conn, ai, err := c.tls(cfg).ServerHandshake(rawConn)
	if err != nil {
		return nil, nil, err
	}
	return conn, withChains(ai, chains), nil
}

// withChains puts the chains verifyPeer built into the TLSInfo, where Go's
// handshake, told to skip verification, left none.
func withChains(ai credentials.AuthInfo, chains CertificateChains) credentials.AuthInfo {
	if ti, ok := ai.(credentials.TLSInfo); ok {
		ti.State.VerifiedChains = chains
		return ti
	}
	return ai
}

func (c *creds) Info() credentials.ProtocolInfo { return c.tls(c.config).Info() }

func (c *creds) Clone() credentials.TransportCredentials {
	d := *c
	d.config = c.config.Clone()
	return &d
}

func (c *creds) OverrideServerName(name string) error {
	c.config.ServerName = name
	return nil
}

// WithNextProtos returns credentials like c that offer protos through ALPN
// (credentials.NextProtosCredentials: a grpc:// target offers "h2").
func (c *creds) WithNextProtos(protos ...string) credentials.TransportCredentials {
	d := c.Clone().(*creds)
	d.nextProtos = append([]string{}, protos...)
	return d
}

// verifyPeer returns the tls.Config.VerifyPeerCertificate of one handshake:
// the checks of the verification type with the roots of the moment, the
// revocation check, the custom check; the verified chains go to *out.
func (s side) verifyPeer(ctx context.Context, serverName string, rawConn net.Conn, out *CertificateChains) func([][]byte, [][]*x509.Certificate) error {
	return func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
		if len(rawCerts) == 0 {
			if s.verification == SkipVerification && s.verify == nil {
				return nil
			}
			return errors.New("advancedtls: the peer sent no certificate")
		}
		certs := make([]*x509.Certificate, len(rawCerts))
		for i, b := range rawCerts {
			c, err := x509.ParseCertificate(b)
			if err != nil {
				return fmt.Errorf("advancedtls: the peer's certificate %d: %w", i, err)
			}
			certs[i] = c
		}
		var chains CertificateChains
		var leaf *x509.Certificate
		if s.verification != SkipVerification {
			var roots *x509.CertPool // nil: the system's
			if s.roots != nil {
				r, err := s.roots(ctx, &ConnectionInfo{RawConn: rawConn, RawCerts: rawCerts})
				if err != nil {
					return fmt.Errorf("advancedtls: the roots: %w", err)
				}
				roots = r
			}
			opts := x509.VerifyOptions{
				Roots:         roots,
				CurrentTime:   time.Now(),
				Intermediates: x509.NewCertPool(),
				KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}
			if !s.client {
				opts.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
			}
			for _, c := range certs[1:] {
				opts.Intermediates.AddCert(c)
			}
			if s.client && s.verification == CertAndHostVerification && serverName != "" {
				host, _, err := net.SplitHostPort(serverName)
				if err != nil {
					host = serverName // no port
				}
				opts.DNSName = host
			}
			var err error
			chains, err = certs[0].Verify(opts)
			if err != nil {
				return fmt.Errorf("advancedtls: %w", err)
			}
			leaf = certs[0]
		}
		if s.revocation != nil {
			check := chains
			if check == nil {
				check = CertificateChains{certs}
			}
			if err := checkChainRevocation(check, *s.revocation); err != nil {
				return err
			}
		}
		if s.verify != nil {
			if _, err := s.verify(&HandshakeVerificationInfo{ServerName: serverName, RawCerts: rawCerts, VerifiedChains: chains, Leaf: leaf}); err != nil {
				return fmt.Errorf("advancedtls: custom verification: %w", err)
			}
		}
		*out = chains
		return nil
	}
}
