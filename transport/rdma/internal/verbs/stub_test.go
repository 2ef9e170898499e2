//go:build !linux || !cgo

package verbs

import (
	"errors"
	"testing"
)

func TestStubNotSupported(t *testing.T) {
	if _, err := Devices(); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Devices() = %v, want ErrNotSupported", err)
	}
	_, err := Open("rxe0")
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Open() = %v, want ErrNotSupported", err)
	}
	want := "rdma: open rxe0: rdma: RDMA not supported in this build (needs linux and cgo)"
	if err.Error() != want {
		t.Errorf("Open() error %q, want %q", err, want)
	}
}
