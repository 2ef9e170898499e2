package advancedtls

import (
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// RevocationOptions configure the revocation check of the peer's chain
// (RFC 5280, gRFC A69).
type RevocationOptions struct {
	// DenyUndetermined refuses a peer whose chains have a certificate of
	// unknown status (no CRL for its issuer, or one that does not
	// verify) and none revoked; by default such a peer is accepted.
	DenyUndetermined bool
	// CRLProvider finds the CRL of each certificate's issuer.
	CRLProvider CRLProvider
}

// CRLProvider finds CRLs during handshakes, so it must be fast: reading
// files belongs in the background (FileWatcherCRLProvider).
type CRLProvider interface {
	// CRL returns the CRL of cert's issuer; nil (or an error) when there
	// is none, which makes cert's status undetermined.
	CRL(cert *x509.Certificate) (*CRL, error)
}

// CRL is a parsed certificate revocation list. Make one with NewCRL or
// ReadCRLFile.
type CRL struct {
	list           *x509.RevocationList
	authorityKeyID []byte
}

var oidDeltaCRLIndicator = asn1.ObjectIdentifier{2, 5, 29, 27}

// NewCRL parses a CRL, PEM ("X509 CRL") or DER. Delta CRLs, CRLs without an
// authority key identifier (RFC 5280 5.2.1 requires one) and CRLs with a
// critical extension other than the issuing distribution point are
// refused; so is an issuing distribution point limited to some
// certificates or reasons or naming an indirect CRL.
func NewCRL(b []byte) (*CRL, error) {
	if block, _ := pem.Decode(b); block != nil {
		if block.Type != "X509 CRL" {
			return nil, fmt.Errorf("advancedtls: a PEM block of type %q, not X509 CRL", block.Type)
		}
		b = block.Bytes
	}
	list, err := x509.ParseRevocationList(b)
	if err != nil {
		return nil, fmt.Errorf("advancedtls: parsing a CRL: %w", err)
	}
	for _, ext := range list.Extensions {
		switch {
		case ext.Id.Equal(oidDeltaCRLIndicator):
			return nil, errors.New("advancedtls: delta CRLs are not supported")
		case ext.Id.Equal(oidIssuingDistributionPoint):
			if err := checkIssuingDistributionPoint(ext.Value); err != nil {
				return nil, err
			}
		case ext.Critical:
			return nil, fmt.Errorf("advancedtls: a CRL with the unsupported critical extension %v", ext.Id)
		}
	}
	if len(list.AuthorityKeyId) == 0 {
		return nil, errors.New("advancedtls: a CRL without the authority key identifier extension")
	}
	return &CRL{list: list, authorityKeyID: list.AuthorityKeyId}, nil
}

var oidIssuingDistributionPoint = asn1.ObjectIdentifier{2, 5, 29, 28}

// issuingDistributionPoint is RFC 5280 5.2.5's extension, without its
// distribution point name, which a CRL read from a file does not need.
type issuingDistributionPoint struct {
	DistributionPoint          asn1.RawValue  `asn1:"optional,tag:0"`
	OnlyContainsUserCerts      bool           `asn1:"optional,tag:1"`
	OnlyContainsCACerts        bool           `asn1:"optional,tag:2"`
	OnlySomeReasons            asn1.BitString `asn1:"optional,tag:3"`
	IndirectCRL                bool           `asn1:"optional,tag:4"`
	OnlyContainsAttributeCerts bool           `asn1:"optional,tag:5"`
}

// checkIssuingDistributionPoint refuses the CRLs that do not cover every
// certificate of their issuer for every reason.
func checkIssuingDistributionPoint(v []byte) error {
	var dp issuingDistributionPoint
	rest, err := asn1.Unmarshal(v, &dp)
	switch {
	case err != nil:
		return fmt.Errorf("advancedtls: a CRL's issuing distribution point: %w", err)
	case len(rest) != 0:
		return errors.New("advancedtls: trailing bytes after a CRL's issuing distribution point")
	case dp.OnlyContainsUserCerts || dp.OnlyContainsCACerts || dp.OnlyContainsAttributeCerts:
		return errors.New("advancedtls: a CRL for some certificate types only")
	case dp.IndirectCRL:
		return errors.New("advancedtls: indirect CRLs are not supported")
	case dp.OnlySomeReasons.BitLength != 0:
		return errors.New("advancedtls: a CRL for some reasons only")
	}
	return nil
}

// ReadCRLFile reads and parses the CRL in the file at path.
func ReadCRLFile(path string) (*CRL, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("advancedtls: %w", err)
	}
	crl, err := NewCRL(b)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return crl, nil
}

// issuerKey is the key CRLs are found by: their issuer's name.
func issuerKey(rawIssuer []byte) string { return string(rawIssuer) }

// StaticCRLProvider holds CRLs given once.
type StaticCRLProvider struct {
	crls map[string]*CRL
}

// NewStaticCRLProvider parses rawCRLs (PEM or DER each), skipping those that
// do not parse.
func NewStaticCRLProvider(rawCRLs [][]byte) *StaticCRLProvider {
	p := &StaticCRLProvider{crls: map[string]*CRL{}}
	for _, b := range rawCRLs {
		if crl, err := NewCRL(b); err == nil {
			p.crls[issuerKey(crl.list.RawIssuer)] = crl
		}
	}
	return p
}

// CRL returns the CRL of cert's issuer, nil when there is none.
func (p *StaticCRLProvider) CRL(cert *x509.Certificate) (*CRL, error) {
	return p.crls[issuerKey(cert.RawIssuer)], nil
}

const (
	defaultCRLRefreshDuration = time.Hour
	minCRLRefreshDuration     = time.Minute
)

// FileWatcherOptions configure a FileWatcherCRLProvider.
type FileWatcherOptions struct {
	// CRLDirectory holds the CRL files. Required.
	CRLDirectory string
	// RefreshDuration is how often the directory is read again: one hour
	// by default, at least a minute.
	RefreshDuration time.Duration
	// CRLReloadingFailedCallback, when set, is told of each file that
	// does not read or parse as a CRL.
	CRLReloadingFailedCallback func(err error)
}

// FileWatcherCRLProvider holds the CRLs of a directory, read when it is made
// and every RefreshDuration until Close, in one goroutine of its own.
type FileWatcherCRLProvider struct {
	opts       FileWatcherOptions
	mu         sync.Mutex
	crls       map[string]*CRL
	stop, done chan struct{}
	closeOnce  sync.Once
}

// NewFileWatcherCRLProvider reads o.CRLDirectory and keeps reading it until
// Close. Files that are not CRLs are skipped (and reported to
// o.CRLReloadingFailedCallback).
func NewFileWatcherCRLProvider(o FileWatcherOptions) (*FileWatcherCRLProvider, error) {
	if o.CRLDirectory == "" {
		return nil, errors.New("advancedtls: CRLDirectory needs to be specified")
	}
	if _, err := os.ReadDir(o.CRLDirectory); err != nil {
		return nil, fmt.Errorf("advancedtls: CRLDirectory %s is not readable: %w", o.CRLDirectory, err)
	}
	if o.RefreshDuration == 0 {
		o.RefreshDuration = defaultCRLRefreshDuration
	}
	o.RefreshDuration = max(o.RefreshDuration, minCRLRefreshDuration)
	p := &FileWatcherCRLProvider{opts: o, crls: map[string]*CRL{}, stop: make(chan struct{}), done: make(chan struct{})}
	p.scan()
	go p.run()
	return p, nil
}

func (p *FileWatcherCRLProvider) run() {
	defer close(p.done)
	t := time.NewTicker(p.opts.RefreshDuration)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.scan()
		}
	}
}

func (p *FileWatcherCRLProvider) failed(err error) {
	if p.opts.CRLReloadingFailedCallback != nil {
		p.opts.CRLReloadingFailedCallback(err)
	}
}

// scan reads the directory. When every file parsed, its CRLs replace the
// ones held (a file removed drops its CRL); otherwise they are added to
// them, so that a file being rewritten loses no CRL.
func (p *FileWatcherCRLProvider) scan() {
	entries, err := os.ReadDir(p.opts.CRLDirectory)
	if err != nil {
		p.failed(fmt.Errorf("advancedtls: reading CRLDirectory: %w", err))
		return
	}
	found := map[string]*CRL{}
	all := true
	for _, e := range entries {
		crl, err := ReadCRLFile(filepath.Join(p.opts.CRLDirectory, e.Name()))
		if err != nil {
			all = false
			p.failed(err)
			continue
		}
		found[issuerKey(crl.list.RawIssuer)] = crl
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if all {
		p.crls = found
		return
	}
	for k, v := range found {
		p.crls[k] = v
	}
}

// CRL returns the CRL of cert's issuer read last, nil when there is none.
func (p *FileWatcherCRLProvider) CRL(cert *x509.Certificate) (*CRL, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crls[issuerKey(cert.RawIssuer)], nil
}

// Close stops the reading of the directory and waits for it.
func (p *FileWatcherCRLProvider) Close() {
	p.closeOnce.Do(func() {
		close(p.stop)
		<-p.done
	})
}

// revocationStatus is the status of a certificate or a chain.
type revocationStatus int

const (
	revocationUndetermined revocationStatus = iota
	revocationUnrevoked
	revocationRevoked
)

// checkChainRevocation accepts the peer when one of its verified chains is
// unrevoked, or undetermined unless o.DenyUndetermined.
func checkChainRevocation(chains CertificateChains, o RevocationOptions) error {
	var revoked, undetermined int
	for _, chain := range chains {
		switch checkChain(chain, o) {
		case revocationUnrevoked:
			return nil
		case revocationUndetermined:
			if !o.DenyUndetermined {
				return nil
			}
			undetermined++
		default:
			revoked++
		}
	}
	return fmt.Errorf("advancedtls: no unrevoked chain: %d revoked, %d undetermined", revoked, undetermined)
}

// checkChain is revoked when a certificate of chain is, else undetermined
// when one's status is unknown, else unrevoked.
func checkChain(chain []*x509.Certificate, o RevocationOptions) revocationStatus {
	status := revocationUnrevoked
	for _, c := range chain {
		switch checkCert(c, chain, o) {
		case revocationRevoked:
			return revocationRevoked
		case revocationUndetermined:
			status = revocationUndetermined
		}
	}
	return status
}

// checkCert finds the CRL of c's issuer, verifies it with the issuer's
// certificate from chain, and looks for c in it.
func checkCert(c *x509.Certificate, chain []*x509.Certificate, o RevocationOptions) revocationStatus {
	if o.CRLProvider == nil {
		return revocationUndetermined
	}
	crl, err := o.CRLProvider.CRL(c)
	if err != nil || crl == nil || !bytes.Equal(crl.list.RawIssuer, c.RawIssuer) {
		return revocationUndetermined
	}
	if verifyCRL(crl, chain) != nil {
		return revocationUndetermined
	}
	for _, e := range crl.list.RevokedCertificateEntries {
		for _, ext := range e.Extensions {
			// An entry naming another issuer (5.3.3) belongs to an
			// indirect CRL, refused by NewCRL; any other critical
			// extension is one this check does not understand.
			if ext.Critical {
				return revocationUndetermined
			}
		}
		if e.SerialNumber != nil && e.SerialNumber.Cmp(c.SerialNumber) == 0 {
			return revocationRevoked
		}
	}
	return revocationUnrevoked
}

// verifyCRL checks crl's signature with the certificate of chain that
// issued it (its subject and key identifier), which must be allowed to sign
// CRLs.
func verifyCRL(crl *CRL, chain []*x509.Certificate) error {
	for _, issuer := range chain {
		if !bytes.Equal(issuer.RawSubject, crl.list.RawIssuer) || !bytes.Equal(issuer.SubjectKeyId, crl.authorityKeyID) {
			continue
		}
		if issuer.KeyUsage != 0 && issuer.KeyUsage&x509.KeyUsageCRLSign == 0 {
			return errors.New("advancedtls: the CRL's issuer may not sign CRLs")
		}
		return crl.list.CheckSignatureFrom(issuer)
	}
	return errors.New("advancedtls: no certificate of the chain issued the CRL")
}
