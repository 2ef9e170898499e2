//go:build linux && cgo

package verbs

import (
	"context"
	"os"
	"syscall"
	"testing"
)

// An eventFile over a pipe (no device needed): a wait whose fd turns
// readable calls try and returns, allocating nothing; the completion
// channel's poller waits this way several times per message.
func TestEventFileWaitAllocs(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	e := newEventFileOf(r, rc)
	var buf [1]byte
	got := 0
	try := func() bool {
		var n int
		var rerr error
		if err := rc.Control(func(fd uintptr) { n, rerr = syscall.Read(int(fd), buf[:]) }); err != nil {
			t.Error(err)
			return true
		}
		if rerr == syscall.EAGAIN {
			return false
		}
		if rerr != nil {
			t.Error(rerr)
			return true
		}
		got += n
		return true
	}
	ctx := context.Background()
	one := []byte{1}
	round := func() {
		if _, err := w.Write(one); err != nil {
			t.Fatal(err)
		}
		if err := e.wait(ctx, try); err != nil {
			t.Fatal(err)
		}
	}
	round() // the first wait may set the poller up
	allocs := testing.AllocsPerRun(200, round)
	if got != 202 { // AllocsPerRun runs it once more to warm up
		t.Fatalf("read %d bytes in 202 waits, want 202", got)
	}
	if allocs != 0 {
		t.Errorf("eventFile.wait allocates %.1f objects per wait, want 0", allocs)
	}
}
