package encoding

import (
	"io"
	"slices"
	"strings"
	"sync"
)

// Identity is the name of the encoding that leaves messages as they are.
// It is never registered: a call without a compressor uses it.
const Identity = "identity"

// Compressor compresses and decompresses messages. Its methods may be
// called from many goroutines at once.
type Compressor interface {
	// Compress returns a writer that compresses what is written to it
	// into w; the message is complete once Close returned.
	Compress(w io.Writer) (io.WriteCloser, error)
	// Decompress returns a reader of r's decompressed bytes. The caller
	// bounds how many it reads.
	Decompress(r io.Reader) (io.Reader, error)
	// Name is the compression's name on the wire, e.g. "gzip". It must
	// be lower case and not "identity".
	Name() string
}

var (
	mu          sync.RWMutex
	compressors = map[string]Compressor{}
)

// RegisterCompressor makes c known by c.Name(), replacing one of that
// name. As in gRPC-go, it is meant for init functions: registering while
// calls run is safe, but which compressor a running call uses is not
// defined.
func RegisterCompressor(c Compressor) {
	name := c.Name()
	if name == "" || name == Identity || strings.ToLower(name) != name {
		panic("encoding: RegisterCompressor: the name " + name + " must be lower case, not empty and not identity")
	}
	mu.Lock()
	compressors[name] = c
	mu.Unlock()
}

// GetCompressor returns the compressor registered by name, nil if none is.
func GetCompressor(name string) Compressor {
	mu.RLock()
	c := compressors[name]
	mu.RUnlock()
	return c
}

// RegisteredCompressorNames returns the names of the registered
// compressors, sorted: what a client advertises it accepts.
func RegisteredCompressorNames() []string {
	mu.RLock()
	names := make([]string, 0, len(compressors))
	for n := range compressors {
		names = append(names, n)
	}
	mu.RUnlock()
	slices.Sort(names)
	return names
}
