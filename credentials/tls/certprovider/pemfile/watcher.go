package pemfile

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/credentials/tls/certprovider"
)

const defaultRefreshDuration = time.Hour

// Options says which files a provider watches.
type Options struct {
	// CertFile holds the identity certificate chain. Optional; KeyFile
	// must be set with it.
	CertFile string
	// KeyFile holds the identity's private key. Optional; CertFile must
	// be set with it, in the same directory (as in gRPC-go, so that both
	// can be replaced at once by renaming the directory).
	KeyFile string
	// RootFile holds the trusted root certificates. Optional.
	RootFile string
	// RefreshDuration is how often the files are read again; one hour
	// when zero.
	RefreshDuration time.Duration
	// Logger gets a warning for each read that fails (not in gRPC-go's
	// Options); nil logs nothing.
	Logger *zap.Logger
}

func (o Options) validate() error {
	if o.CertFile == "" && o.KeyFile == "" && o.RootFile == "" {
		return errors.New("pemfile: at least one credential file needs to be specified")
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return errors.New("pemfile: private key file and identity cert file should be both specified or not specified")
	}
	if filepath.Dir(o.CertFile) != filepath.Dir(o.KeyFile) {
		return errors.New("pemfile: certificate and key file must be in the same directory")
	}
	if o.RefreshDuration < 0 {
		return fmt.Errorf("pemfile: negative RefreshDuration %v", o.RefreshDuration)
	}
	return nil
}

// NewProvider returns a provider of the files o names, read once before it
// returns and then every o.RefreshDuration until Close. Files that cannot
// be read yet are not an error: KeyMaterial waits for them.
func NewProvider(o Options) (certprovider.Provider, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.RefreshDuration == 0 {
		o.RefreshDuration = defaultRefreshDuration
	}
	log := zap.NewNop()
	if o.Logger != nil {
		log = o.Logger.Named("pemfile")
	}
	w := &watcher{opts: o, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	if o.CertFile != "" {
		w.identity = certprovider.NewDistributor()
	}
	if o.RootFile != "" {
		w.roots = certprovider.NewDistributor()
	}
	w.refresh()
	go w.run()
	return w, nil
}

// watcher is the Provider. Its fields other than the distributors are
// owned by the run goroutine after NewProvider returns.
type watcher struct {
	opts       Options
	log        *zap.Logger
	identity   *certprovider.Distributor // nil without CertFile
	roots      *certprovider.Distributor // nil without RootFile
	lastCert   []byte                    // the contents last distributed
	lastKey    []byte
	lastRoots  []byte
	stop, done chan struct{}
	closeOnce  sync.Once
}

func (w *watcher) run() {
	defer close(w.done)
	t := time.NewTicker(w.opts.RefreshDuration)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.refresh()
		}
	}
}

// refresh reads the files and distributes what changed and parses.
func (w *watcher) refresh() {
	if w.identity != nil {
		cert, cerr := os.ReadFile(w.opts.CertFile)
		key, kerr := os.ReadFile(w.opts.KeyFile)
		switch {
		case cerr != nil || kerr != nil:
			w.log.Warn("reading the identity", zap.Error(errors.Join(cerr, kerr)))
		case bytes.Equal(cert, w.lastCert) && bytes.Equal(key, w.lastKey):
		default:
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				w.log.Warn("parsing the identity", zap.String("cert", w.opts.CertFile), zap.String("key", w.opts.KeyFile), zap.Error(err))
				break
			}
			w.lastCert, w.lastKey = cert, key
			w.identity.Set(&certprovider.KeyMaterial{Certs: []tls.Certificate{pair}}, nil)
		}
	}
	if w.roots != nil {
		b, err := os.ReadFile(w.opts.RootFile)
		switch {
		case err != nil:
			w.log.Warn("reading the roots", zap.Error(err))
		case bytes.Equal(b, w.lastRoots):
		default:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(b) {
				w.log.Warn("no PEM certificate in the roots", zap.String("file", w.opts.RootFile))
				break
			}
			w.lastRoots = b
			w.roots.Set(&certprovider.KeyMaterial{Roots: pool}, nil)
		}
	}
}

// KeyMaterial returns the identity and roots read last, waiting for the
// files to be read once until ctx ends.
func (w *watcher) KeyMaterial(ctx context.Context) (*certprovider.KeyMaterial, error) {
	km := &certprovider.KeyMaterial{}
	if w.identity != nil {
		id, err := w.identity.KeyMaterial(ctx)
		if err != nil {
			return nil, err
		}
		km.Certs = id.Certs
	}
	if w.roots != nil {
		r, err := w.roots.KeyMaterial(ctx)
		if err != nil {
			return nil, err
		}
		km.Roots = r.Roots
	}
	return km, nil
}

// Close stops the watcher and waits for it; KeyMaterial then returns
// certprovider.ErrProviderClosed.
func (w *watcher) Close() {
	w.closeOnce.Do(func() {
		close(w.stop)
		<-w.done
		if w.identity != nil {
			w.identity.Stop()
		}
		if w.roots != nil {
			w.roots.Stop()
		}
	})
}
