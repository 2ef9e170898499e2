package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/store/storetest"
)

// TestRefusesDataDir: kvserver will not start on a data directory that is
// someone else's or that it cannot read; it says why, exits 1, and leaves
// every byte of the directory as it was.
func TestRefusesDataDir(t *testing.T) {
	// A store of kvserver's own to damage.
	good := t.TempDir()
	p := startServer(t, good, "--data-dir", "data", "--listen", "tcp://127.0.0.1:0")
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.logs)
	}
	good = filepath.Join(good, "data")

	tests := []struct {
		name  string
		setup func(t *testing.T) string
		want  string
	}{
		{"someone's files", func(t *testing.T) string {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "thesis.tex"), []byte(`\documentclass{book}`), 0o644)
			return dir
		}, "not a kvstore data directory"},
		{"someone else's pebble", func(t *testing.T) string {
			return filepath.Join(storetest.Copy(t, good), "pebble")
		}, "not a kvstore data directory"},
		{"corrupt marker", func(t *testing.T) string {
			dir := storetest.Copy(t, good)
			os.WriteFile(filepath.Join(dir, "KVSTORE"), []byte("{{{{"), 0o644)
			return dir
		}, "corrupt kvstore data directory"},
		{"corrupt manifest", func(t *testing.T) string {
			dir := storetest.Copy(t, good)
			ms, _ := filepath.Glob(filepath.Join(dir, "pebble", "MANIFEST-*"))
			for _, m := range ms {
				os.WriteFile(m, bytes.Repeat([]byte{0xba, 0xd0}, 64), 0o644)
			}
			if len(ms) == 0 {
				t.Fatal("no MANIFEST to corrupt")
			}
			return dir
		}, "Pebble cannot read"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.setup(t)
			before := storetest.Snapshot(t, dir)
			var stderr bytes.Buffer
			code := run([]string{"--data-dir", dir, "--listen", "tcp://127.0.0.1:0"}, &bytes.Buffer{}, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), "cannot start") || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, stderr.String(), tc.want)
			}
			if after := storetest.Snapshot(t, dir); after != before {
				t.Fatalf("the refused directory changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestRefusesDirInUse: a second kvserver on a data directory in use fails
// with a clear message; the first one goes on serving.
func TestRefusesDirInUse(t *testing.T) {
	dir := t.TempDir()
	p := startServer(t, dir, "--data-dir", "data", "--listen", "tcp://127.0.0.1:0")
	var stderr bytes.Buffer
	code := run([]string{"--data-dir", filepath.Join(dir, "data"), "--listen", "tcp://127.0.0.1:0"}, &bytes.Buffer{}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "in use") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and a message that the directory is in use", code, stderr.String())
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("the first server: exit %d:\n%s", code, p.logs)
	}
}
