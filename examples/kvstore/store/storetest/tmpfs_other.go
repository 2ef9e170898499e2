//go:build !linux

package storetest

import "testing"

// TmpFS skips the test: mounting a small tmpfs is Linux's.
func TmpFS(t testing.TB, size int64) string {
	t.Skip("mounting a small tmpfs is Linux only")
	return ""
}

// Fill is TmpFS's companion; it is never reached.
func Fill(t testing.TB, path string) int64 {
	t.Skip("Linux only")
	return 0
}
