package storetest

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

// TmpFS mounts a tmpfs of size bytes on a new temporary directory, for the
// length of the test: a real file system that fills up. It skips the test
// unless it runs as root (CI does) and may mount.
func TmpFS(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root (CI runs the tests as root)")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Skipf("cannot mount a tmpfs on %s (a container without CAP_SYS_ADMIN?): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file at path until the file system is full, and returns
// how many bytes it wrote.
func Fill(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var n int64
	for {
		m, err := f.Write(chunk)
		n += int64(m)
		if err == nil {
			continue
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("filling %s: %v", path, err)
		}
		return n
	}
}
