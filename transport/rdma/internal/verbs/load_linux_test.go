//go:build linux && cgo

package verbs

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// envNoVerbs names what scripts/check-noverbs.sh took away before this test
// binary was built or run: "headers" (built without <infiniband/verbs.h>)
// or "library" (run without libibverbs.so.1).
const envNoVerbs = "RDMARPC_TEST_NOVERBS"

// TestWithoutVerbs: a binary built without libibverbs' headers, or run
// without the library, builds and starts, and Devices and Open say why there
// is no RDMA and what to install, with an error that matches ErrNotSupported
// (which the transport turns into ErrNoDevice, so auto:// falls back to TCP).
func TestWithoutVerbs(t *testing.T) {
	// The loader's own words differ by how the library is missing.
	want := map[string]string{
		"headers": "built without libibverbs' headers (<infiniband/verbs.h>), so it has no RDMA: install libibverbs-dev",
		"library": "so there is no RDMA: install libibverbs and a provider",
	}[os.Getenv(envNoVerbs)]
	if want == "" {
		t.Skipf("%s not set: scripts/check-noverbs.sh runs this without libibverbs", envNoVerbs)
	}
	_, derr := Devices()
	_, oerr := Open("rxe0")
	for _, err := range []error{derr, oerr} {
		if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error matching ErrNotSupported that says %q", err, want)
		}
	}
}
