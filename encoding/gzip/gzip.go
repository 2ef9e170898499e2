package gzip

import (
	"compress/gzip"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/encoding"
)

// Name is the compressor's name on the wire.
const Name = "gzip"

func init() {
	c := &compressor{}
	c.setLevel(gzip.DefaultCompression)
	encoding.RegisterCompressor(c)
}

// SetLevel sets the compression level of the registered "gzip"
// compressor: gzip.HuffmanOnly, or gzip.NoCompression to
// gzip.BestCompression. Like gRPC-go's, it is meant for init functions,
// before calls run. An invalid level is an error.
func SetLevel(level int) error {
	if level < gzip.HuffmanOnly || level > gzip.BestCompression {
		return fmt.Errorf("gzip: invalid compression level %d", level)
	}
	c, ok := encoding.GetCompressor(Name).(*compressor)
	if !ok {
		return fmt.Errorf("gzip: the registered %q compressor is not this package's", Name)
	}
	c.setLevel(level)
	return nil
}

// compressor pools its writers and readers: a gzip writer holds some
// hundreds of KiB of state, too much to allocate for each message.
// SetLevel swaps in a new pool of writers of the new level.
type compressor struct {
	writers atomic.Pointer[sync.Pool] // of *writer
	readers sync.Pool                 // of *reader
}

type writer struct {
	*gzip.Writer
	pool *sync.Pool
}

// Close ends the message and returns the writer to its pool.
func (w *writer) Close() error {
	err := w.Writer.Close()
	w.pool.Put(w)
	return err
}

type reader struct {
	*gzip.Reader
	pool *sync.Pool
}

// Read returns the reader to its pool once it reached the end of the
// message.
func (r *reader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if err == io.EOF {
		r.pool.Put(r)
	}
	return n, err
}

func (c *compressor) setLevel(level int) {
	p := new(sync.Pool)
	p.New = func() any {
		w, _ := gzip.NewWriterLevel(io.Discard, level) // level checked by SetLevel
		return &writer{Writer: w, pool: p}
	}
	c.writers.Store(p) // writers of the old level go back to the old pool
}

func (c *compressor) Compress(w io.Writer) (io.WriteCloser, error) {
	z := c.writers.Load().Get().(*writer)
	z.Reset(w)
	return z, nil
}

func (c *compressor) Decompress(r io.Reader) (io.Reader, error) {
	z, ok := c.readers.Get().(*reader)
	if !ok {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		return &reader{Reader: gz, pool: &c.readers}, nil
	}
	if err := z.Reset(r); err != nil {
		c.readers.Put(z)
		return nil, err
	}
	return z, nil
}

func (c *compressor) Name() string { return Name }
