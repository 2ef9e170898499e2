package codegen_test

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the protoc-gen-go-grpc the tests may have installed.
func TestMain(m *testing.M) {
	code := m.Run()
	if grpcGenInstalled != "" {
		os.RemoveAll(filepath.Dir(grpcGenInstalled))
	}
	os.Exit(code)
}
