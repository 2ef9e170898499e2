package codegen_test

import (
	"os"
	"path/filepath"
	"testing"
)

// tempDirs are removed after the tests: plugins built once for them all.
var tempDirs []string

// TestMain removes the plugins the tests built or installed.
func TestMain(m *testing.M) {
	code := m.Run()
	if grpcGenInstalled != "" {
		os.RemoveAll(filepath.Dir(grpcGenInstalled))
	}
	for _, d := range tempDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}
