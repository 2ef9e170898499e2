package pemfile_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/credentials/tls/certprovider"
	"github.com/rdmarpc/rdmarpc/credentials/tls/certprovider/pemfile"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// selfSigned returns a certificate for cn and its key, in PEM.
func selfSigned(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func commonName(t *testing.T, km *certprovider.KeyMaterial) string {
	t.Helper()
	if len(km.Certs) != 1 {
		t.Fatalf("%d identities, want 1", len(km.Certs))
	}
	c, err := x509.ParseCertificate(km.Certs[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c.Subject.CommonName
}

// TestReload: the material is there when NewProvider returns; a rewrite of
// the files is picked up by a later refresh; a key that does not match
// the certificate (half a rotation) keeps the pair read before; after Close,
// KeyMaterial says the provider is closed.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	cert, key, roots := filepath.Join(dir, "c.pem"), filepath.Join(dir, "c.key"), filepath.Join(dir, "roots.pem")
	c1, k1 := selfSigned(t, "one")
	write(t, cert, c1)
	write(t, key, k1)
	write(t, roots, c1)
	p, err := pemfile.NewProvider(pemfile.Options{CertFile: cert, KeyFile: key, RootFile: roots, RefreshDuration: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	km, err := p.KeyMaterial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if commonName(t, km) != "one" || km.Roots == nil {
		t.Fatalf("first material: %+v", km)
	}

	c2, k2 := selfSigned(t, "two")
	write(t, cert, c2) // the key is still one's: not a pair
	c3, _ := selfSigned(t, "three")
	write(t, roots, c3) // the roots change, a sign that a refresh ran
	for {
		km, err = p.KeyMaterial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rootsHold(km, c3) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if got := commonName(t, km); got != "one" {
		t.Fatalf("with a certificate and key that do not match, the identity is %q, want the previous pair's", got)
	}
	write(t, key, k2)
	for commonName(t, km) != "two" {
		if km, err = p.KeyMaterial(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}

	p.Close()
	if _, err := p.KeyMaterial(ctx); !errors.Is(err, certprovider.ErrProviderClosed) {
		t.Fatalf("after Close: %v, want ErrProviderClosed", err)
	}
}

// rootsHold says whether km's roots verify the certificate in certPEM.
func rootsHold(km *certprovider.KeyMaterial, certPEM []byte) bool {
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return false
	}
	_, err = c.Verify(x509.VerifyOptions{Roots: km.Roots})
	return err == nil
}

// TestWaitsForFiles: a provider of files not written yet makes KeyMaterial
// wait, until its context ends or the files appear.
func TestWaitsForFiles(t *testing.T) {
	dir := t.TempDir()
	roots := filepath.Join(dir, "roots.pem")
	p, err := pemfile.NewProvider(pemfile.Options{RootFile: roots, RefreshDuration: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	short, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.KeyMaterial(short); !errors.Is(err, context.Canceled) {
		t.Fatalf("no file yet: %v, want the context's error", err)
	}
	c, _ := selfSigned(t, "root")
	write(t, roots, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	km, err := p.KeyMaterial(ctx)
	if err != nil || !rootsHold(km, c) {
		t.Fatalf("once written: %v, %v", km, err)
	}
}

func TestOptionsRefused(t *testing.T) {
	for _, o := range []pemfile.Options{
		{},
		{CertFile: "a/c.pem"},
		{KeyFile: "a/c.key"},
		{CertFile: "a/c.pem", KeyFile: "b/c.key"},
		{RootFile: "r.pem", RefreshDuration: -time.Second},
	} {
		if p, err := pemfile.NewProvider(o); err == nil {
			p.Close()
			t.Errorf("%+v: accepted", o)
		}
	}
}
