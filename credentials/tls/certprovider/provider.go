package certprovider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync"
)

// Provider keeps credentials up to date with the secrets they rely on.
// Implementations may fetch from local files or remote sources and share
// state between instances as they see fit.
type Provider interface {
	// KeyMaterial returns the current key material, waiting for the first
	// until ctx ends. Callers treat the result as read-only.
	KeyMaterial(ctx context.Context) (*KeyMaterial, error)
	// Close releases what the provider holds and stops its refreshes.
	Close()
}

// KeyMaterial is what a Provider hands out.
type KeyMaterial struct {
	// Certs are the certificate chains (with their keys) that prove the
	// local identity.
	Certs []tls.Certificate
	// Roots are the trusted roots that verify the peer's identity.
	Roots *x509.CertPool
}

// ErrProviderClosed is what KeyMaterial returns once the provider, or the
// Distributor behind it, is closed.
var ErrProviderClosed = errors.New("certprovider: provider instance is closed")

// Distributor holds the latest key material (or error) of a provider and
// hands it out: KeyMaterial waits for the first Set, then returns the last
// one. Its zero value is not usable: call NewDistributor.
type Distributor struct {
	mu      sync.Mutex
	km      *KeyMaterial
	err     error
	closed  bool
	ready   chan struct{} // closed by the first Set or by Stop
	readyOK bool
}

// NewDistributor returns a Distributor with no material yet.
func NewDistributor() *Distributor {
	return &Distributor{ready: make(chan struct{})}
}

// Set records km, or err when the source failed; readers get what was set
// last. The first Set wakes the readers waiting for it.
func (d *Distributor) Set(km *KeyMaterial, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.km, d.err = km, err
	if !d.readyOK {
		d.readyOK = true
		close(d.ready)
	}
}

// KeyMaterial returns the last material set, waiting for the first Set
// until ctx ends or the Distributor stops.
func (d *Distributor) KeyMaterial(ctx context.Context) (*KeyMaterial, error) {
	d.mu.Lock()
	ready := d.ready
	d.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return nil, ErrProviderClosed
	case d.err != nil:
		return nil, d.err
	case d.km == nil:
		return nil, errors.New("certprovider: no key material")
	}
	return d.km, nil
}

// Stop ends the Distributor: readers, waiting or to come, get
// ErrProviderClosed.
func (d *Distributor) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.closed = true
	d.km, d.err = nil, nil
	if !d.readyOK {
		d.readyOK = true
		close(d.ready)
	}
}
