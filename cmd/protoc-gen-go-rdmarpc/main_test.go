package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/codegen"
)

func TestVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "protoc-gen-go-rdmarpc")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// protoc-gen-go-grpc takes the flag with one dash or two; so do we.
	for _, flag := range []string{"--version", "-version"} {
		out, err := exec.Command(bin, flag).Output()
		if err != nil {
			t.Fatalf("%s: %v", flag, err)
		}
		if got, want := strings.TrimSpace(string(out)), codegen.PluginName+" "+codegen.Version; got != want {
			t.Errorf("%s printed %q; want %q", flag, got, want)
		}
	}
}
