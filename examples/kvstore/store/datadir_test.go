package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/store/storetest"
)

func openDirStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

func TestPersistent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // Open creates it
	s := openDirStore(t, dir)
	if err := s.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDirStore(t, dir)
	defer s.Close()
	if v, ok := mustGet(t, s, "k"); !ok || v != "v" {
		t.Fatalf("after reopening: %q, %v; want v, true", v, ok)
	}
	if _, err := Open(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "lock") {
		t.Fatalf("a second Open of a directory in use: %v, want an error about its lock", err)
	}
}

func TestPersistentNoSync(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Put([]byte("k"), []byte("v"))
	if err := s.Close(); err != nil { // Close syncs
		t.Fatal(err)
	}
	s = openDirStore(t, dir)
	defer s.Close()
	if v, _ := mustGet(t, s, "k"); v != "v" {
		t.Fatalf("after a clean Close with NoSync: %q, want v", v)
	}
}

// TestNewDirs: directories that are new to the store, or that it left
// half-created, are (re)created.
func TestNewDirs(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"missing", func(t *testing.T, dir string) { os.Remove(dir) }},
		{"empty", func(t *testing.T, dir string) {}},
		{"half-written marker", func(t *testing.T, dir string) { write(t, dir, markerTmpName, "{") }},
		{"creation cut short", func(t *testing.T, dir string) {
			write(t, dir, markerName, `{"format":"rdmarpc-kvstore","version":1,"state":"creating"}`)
			write(t, dir, "pebble/000001.log", "partial")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			s := openDirStore(t, dir)
			defer s.Close()
			if err := s.Put([]byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			m, err := inspectDir(dir)
			if err != nil || m == nil || m.State != stateReady {
				t.Fatalf("marker after Open: %+v, %v; want state ready", m, err)
			}
			if _, err := os.Stat(filepath.Join(dir, markerTmpName)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("%s left behind: %v", markerTmpName, err)
			}
		})
	}
}

// TestRefusedDirs: directories that are not the store's, or that it cannot
// read, are refused with a clear error, and not one byte changes.
func TestRefusedDirs(t *testing.T) {
	// A real store to damage.
	good := t.TempDir()
	s := openDirStore(t, good)
	s.Put([]byte("k"), []byte("v"))
	s.Close()

	tests := []struct {
		name    string
		setup   func(t *testing.T) string // returns the data dir
		want    error
		message string
	}{
		{"someone's files", func(t *testing.T) string {
			dir := t.TempDir()
			write(t, dir, "notes.txt", "mine")
			write(t, dir, "src/main.go", "package main")
			return dir
		}, ErrForeignDir, "no KVSTORE file"},
		{"a file", func(t *testing.T) string {
			return write(t, t.TempDir(), "file", "x")
		}, ErrForeignDir, "not a directory"},
		{"another pebble database", func(t *testing.T) string {
			dir := storetest.Copy(t, good)
			os.Remove(filepath.Join(dir, markerName))
			return filepath.Join(dir, pebbleDirName)
		}, ErrForeignDir, "no KVSTORE file"},
		{"garbage marker", func(t *testing.T) string {
			dir := storetest.Copy(t, good)
			write(t, dir, markerName, "\x00\x01garbage")
			return dir
		}, ErrCorruptDir, "not a kvstore marker"},
		{"foreign marker", func(t *testing.T) string {
			dir := storetest.Copy(t, good)
			write(t, dir, markerName, `{"format":"something-else","version":1,"state":"ready"}`)
			return dir
		}, ErrCorruptDir, `format "something-else"`},
		{"marker from the future", func(t *testing.T) string {
			dir := storetest.Copy(t, good)
			write(t, dir, markerName, `{"format":"rdmarpc-kvstore","version":7,"state":"ready"}`)
			return dir
		}, ErrCorruptDir, "newer kvserver"},
		{"unknown state", func(t *testing.T) string {
			dir := storetest.Copy(t, good)
			write(t, dir, markerName, `{"format":"rdmarpc-kvstore","version":1,"state":"weird"}`)
			return dir
		}, ErrCorruptDir, `state "weird"`},
		{"pebble files gone", func(t *testing.T) string {
			dir := storetest.Copy(t, good)
			os.RemoveAll(filepath.Join(dir, pebbleDirName))
			return dir
		}, ErrCorruptDir, "missing"},
		{"pebble files emptied", func(t *testing.T) string {
			dir := storetest.Copy(t, good)
			os.RemoveAll(filepath.Join(dir, pebbleDirName))
			os.Mkdir(filepath.Join(dir, pebbleDirName), 0o755)
			return dir
		}, ErrCorruptDir, "Pebble cannot read"},
		{"garbage manifest", func(t *testing.T) string {
			dir := storetest.Copy(t, good)
			manifests, _ := filepath.Glob(filepath.Join(dir, pebbleDirName, "MANIFEST-*"))
			if len(manifests) == 0 {
				t.Fatal("no MANIFEST in a fresh store")
			}
			for _, m := range manifests {
				write(t, filepath.Dir(m), filepath.Base(m), strings.Repeat("\xde\xad\xbe\xef", 100))
			}
			return dir
		}, ErrCorruptDir, "Pebble cannot read"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.setup(t)
			before := storetest.Snapshot(t, filepath.Dir(dir))
			s, err := Open(Options{Dir: dir})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Open: %v\nwant an error wrapping %q that says %q", err, tc.want, tc.message)
			}
			if after := storetest.Snapshot(t, filepath.Dir(dir)); after != before {
				t.Fatalf("refusing the directory changed it:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// write writes a file under dir, creating parents, and returns its path.
func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
