package credentials_test

import (
	"path/filepath"
	"testing"

	"github.com/rdmarpc/rdmarpc/internal/testpki"
)

// writeFile writes b to a file named name in the test's temporary
// directory and returns its path.
func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	testpki.WriteFile(t, p, b)
	return p
}
