package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// fakeDisk is a file system's free space as a test sets it, and a count of
// the statfs calls that asked.
type fakeDisk struct {
	free  atomic.Uint64
	calls atomic.Int64
}

func (d *fakeDisk) usage(string) (vfs.DiskUsage, error) {
	d.calls.Add(1)
	return vfs.DiskUsage{AvailBytes: d.free.Load(), TotalBytes: 1 << 40}, nil
}

// fakeClock stands still until a test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestDiskGuard: below the threshold writes are refused with a
// *DiskFullError that says how much is free and needed, reads go on, and
// writes are accepted again once space is freed.
func TestDiskGuard(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(1 << 30)
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	s, err := Open(Options{Dir: t.TempDir(), MinFreeBytes: 8 << 20, diskUsage: disk.usage, now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}

	disk.free.Store(5 << 20)
	clock.advance(guardInterval)
	value := []byte("vv")
	for _, write := range []func() error{
		func() error { return s.Put([]byte("k2"), value) },
		func() error { return s.Delete([]byte("k")) }, // a tombstone takes space too
		func() error { return s.Batch([]Mutation{{Key: []byte("k2"), Value: value}}) },
		func() error { return s.CompareAndSwap([]byte("k2"), Absent(), value) },
	} {
		err := write()
		var df *DiskFullError
		if !errors.As(err, &df) || !errors.Is(err, ErrDiskFull) {
			t.Fatalf("a write with 5 MiB free and an 8 MiB threshold: %v, want a *DiskFullError", err)
		}
		if df.Free != 5<<20 || df.Need != 8<<20+2+2+mutationOverhead && df.Need != 8<<20+1+mutationOverhead {
			t.Fatalf("%+v: want Free 5 MiB, Need 8 MiB plus the write", df)
		}
	}
	if v, ok := mustGet(t, s, "k"); !ok || v != "v" {
		t.Fatalf("a read on the full disk: %q, %v", v, ok)
	}
	if err := s.Writable(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Writable on the full disk: %v, want ErrDiskFull", err)
	}
	if _, ok := mustGet(t, s, "k2"); ok {
		t.Fatal("a refused write was applied")
	}

	disk.free.Store(1 << 30)
	if err := s.Put([]byte("k2"), value); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("before the next check: %v, want the disk still counted full", err)
	}
	clock.advance(guardInterval)
	if err := s.Put([]byte("k2"), value); err != nil {
		t.Fatalf("after space was freed: %v", err)
	}
	if err := s.Writable(); err != nil {
		t.Fatalf("Writable after space was freed: %v", err)
	}
}

// TestDiskGuardIsCheap: statfs is called once per interval, or per quarter
// of the threshold written, not once per write; and the bytes written since
// the last statfs count as used.
func TestDiskGuardIsCheap(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(1 << 30)
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	s, err := Open(Options{Dir: t.TempDir(), MinFreeBytes: 8 << 20, NoSync: true, diskUsage: disk.usage, now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := disk.calls.Load()
	value := bytes.Repeat([]byte("x"), 1000)
	for i := range 1000 { // about 1 MiB, in one instant
		if err := s.Put([]byte{byte(i), byte(i >> 8)}, value); err != nil {
			t.Fatal(err)
		}
	}
	if n := disk.calls.Load() - before; n > 1 {
		t.Fatalf("%d statfs calls for 1000 writes within one interval, want at most 1", n)
	}
	for i := range 8000 { // about 8 MiB more: a statfs per 2 MiB
		if err := s.Put([]byte{byte(i), byte(i >> 8), 1}, value); err != nil {
			t.Fatal(err)
		}
	}
	if n := disk.calls.Load() - before; n < 4 || n > 6 {
		t.Fatalf("%d statfs calls for 9 MB written within one interval, want about one per 2 MiB", n)
	}
	disk.free.Store(9 << 20)
	clock.advance(guardInterval)
	var admitted int
	for i := 0; ; i++ {
		if err := s.Put([]byte{byte(i), byte(i >> 8), 2}, value); err != nil {
			if !errors.Is(err, ErrDiskFull) {
				t.Fatal(err)
			}
			break
		}
		admitted++
	}
	if admitted == 0 || admitted > 1<<20/len(value) {
		t.Fatalf("%d writes of 1 KB admitted with 1 MiB above the threshold", admitted)
	}
}

// TestOpenOnFullDisk: a store opened on a full disk serves reads, refuses
// writes, and takes them again once space is freed, without a restart;
// a new store is not created on a full disk.
func TestOpenOnFullDisk(t *testing.T) {
	watchInterval = 5 * time.Millisecond
	defer func() { watchInterval = time.Second }()
	dir := filepath.Join(t.TempDir(), "data")
	disk := &fakeDisk{}
	disk.free.Store(512 << 10)
	o := Options{Dir: dir, MinFreeBytes: 1 << 20, diskUsage: disk.usage}
	if _, err := Open(o); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("creating a store on a full disk: %v, want ErrDiskFull", err)
	}

	disk.free.Store(1 << 30)
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	for i := range 96 { // 3 MiB in the WAL, which Close leaves unflushed
		if err := s.Put([]byte{'w', byte(i)}, bytes.Repeat([]byte{'x'}, 32<<10)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	var wal uint64
	logs, _ := filepath.Glob(filepath.Join(dir, "pebble", "*.log"))
	for _, l := range logs {
		fi, err := os.Stat(l)
		if err != nil {
			t.Fatal(err)
		}
		wal += uint64(fi.Size())
	}
	if wal < 2<<20 {
		t.Fatalf("%d bytes of WAL, want 3 MiB", wal)
	}

	// Room for the threshold but not for the flush of the replayed WAL.
	disk.free.Store(wal - 512<<10)
	s, err = Open(o)
	if err != nil {
		t.Fatal(err)
	}
	var df *DiskFullError
	if err := s.Put([]byte("k2"), []byte("v2")); !errors.As(err, &df) || df.Need != wal {
		t.Fatalf("a write on a disk too full to flush the WAL: %v, want a *DiskFullError needing the WAL's %d bytes", err, wal)
	}
	s.Close()

	disk.free.Store(512 << 10)
	s, err = Open(o)
	if err != nil {
		t.Fatalf("opening on a full disk: %v, want a read-only store", err)
	}
	defer s.Close()
	if v, ok := mustGet(t, s, "k"); !ok || v != "v" {
		t.Fatalf("a read on the full disk: %q, %v", v, ok)
	}
	if err := s.Writable(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Writable after opening on a full disk: %v", err)
	}
	for range 3 { // refused, however often
		if err := s.Put([]byte("k2"), []byte("v2")); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("a write on the full disk: %v, want ErrDiskFull", err)
		}
	}
	disk.free.Store(1 << 30)
	deadline := time.Now().Add(time.Minute) // only against hanging for ever
	for {
		err := s.Put([]byte("k2"), []byte("v2"))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrDiskFull) || time.Now().After(deadline) {
			t.Fatalf("a write after space was freed: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if v, ok := mustGet(t, s, "k"); !ok || v != "v" {
		t.Fatalf("after reopening for writes: %q, %v", v, ok)
	}
}
