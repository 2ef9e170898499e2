package advancedtls_test

import (
	"encoding/pem"
	"testing"

	"github.com/rdmarpc/rdmarpc/security/advancedtls"
)

// FuzzNewCRL: any bytes given as a CRL (a file in a watched directory)
// parse or fail, never panic; a CRL that parses is usable by a provider.
func FuzzNewCRL(f *testing.F) {
	ca := newCA(f, "ca")
	l := ca.issue(f, "x", false)
	crl := ca.crl(f, l)
	f.Add(crl)
	b, _ := pem.Decode(crl)
	f.Add(b.Bytes)
	f.Add(ca.pem)
	f.Add([]byte("-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := advancedtls.NewCRL(b)
		if err != nil {
			return
		}
		if c == nil {
			t.Fatal("NewCRL returned neither a CRL nor an error")
		}
		p := advancedtls.NewStaticCRLProvider([][]byte{b})
		if _, err := p.CRL(l.cert); err != nil {
			t.Fatal(err)
		}
	})
}
