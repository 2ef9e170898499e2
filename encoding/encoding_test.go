package encoding_test

import (
	"io"
	"slices"
	"testing"

	"github.com/rdmarpc/rdmarpc/encoding"
)

type fake struct{ name string }

func (f fake) Compress(w io.Writer) (io.WriteCloser, error) { return nil, nil }
func (f fake) Decompress(r io.Reader) (io.Reader, error)    { return r, nil }
func (f fake) Name() string                                 { return f.name }

func TestRegistry(t *testing.T) {
	if encoding.GetCompressor("fake-x") != nil {
		t.Fatal("found a compressor never registered")
	}
	encoding.RegisterCompressor(fake{"fake-x"})
	if c := encoding.GetCompressor("fake-x"); c == nil || c.Name() != "fake-x" {
		t.Fatalf("GetCompressor = %v", c)
	}
	if !slices.Contains(encoding.RegisteredCompressorNames(), "fake-x") {
		t.Errorf("RegisteredCompressorNames() = %v", encoding.RegisteredCompressorNames())
	}
	for _, bad := range []string{"", "identity", "Gzip"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("RegisterCompressor(%q) did not panic", bad)
				}
			}()
			encoding.RegisterCompressor(fake{bad})
		}()
	}
}
