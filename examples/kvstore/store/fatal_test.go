package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// enospcOnWAL fails every write and sync of a write-ahead log with ENOSPC
// while it is on: a disk that filled up under Pebble.
func enospcOnWAL() *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo, errorfs.OpFileFlush:
			if strings.HasSuffix(op.Path, ".log") {
				return syscall.ENOSPC
			}
		}
		return nil
	})}
}

// TestFatalCommitError: when Pebble cannot write its WAL it reports a
// fatal commit error through its logger, which used to exit the process
// (the test binary died with "exit status 1"). Now the write that met the
// error fails with ErrFailed, so do all later writes, reads go on, and the
// store closes.
func TestFatalCommitError(t *testing.T) {
	for _, op := range []struct {
		name  string
		write func(s *Store, key string) error
	}{
		{"Put", func(s *Store, key string) error { return s.Put([]byte(key), []byte("v")) }},
		{"Batch", func(s *Store, key string) error {
			return s.Batch([]Mutation{{Key: []byte(key), Value: []byte("v")}, {Key: []byte(key + "/2"), Value: []byte("v")}})
		}},
		{"CompareAndSwap", func(s *Store, key string) error { return s.CompareAndSwap([]byte(key), Absent(), []byte("v")) }},
	} {
		t.Run(op.name, func(t *testing.T) {
			inj := enospcOnWAL()
			s, err := Open(Options{InMemory: true, fs: errorfs.Wrap(vfs.NewMem(), inj)})
			if err != nil {
				t.Fatal(err)
			}
			if err := op.write(s, "before"); err != nil {
				t.Fatal(err)
			}
			inj.On()
			err = op.write(s, "during")
			if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("a write whose WAL write fails: %v, want an error wrapping ErrFailed and ENOSPC", err)
			}
			inj.Off() // the disk has room again, but Pebble's state is not to be trusted
			if err := op.write(s, "after"); !errors.Is(err, ErrFailed) {
				t.Fatalf("a write after the fatal error: %v, want ErrFailed", err)
			}
			if v, ok := mustGet(t, s, "before"); !ok || v != "v" {
				t.Fatalf("Get of a key written before the failure: %q, %v", v, ok)
			}
			if err := s.Writable(); !errors.Is(err, ErrFailed) {
				t.Fatalf("Writable after the failure: %v, want ErrFailed", err)
			}
			if _, _, err := s.Scan(ScanOptions{Limit: 10}); err != nil {
				t.Fatalf("Scan after the failure: %v", err)
			}
			s.Close() // returns (its error is Pebble's sticky WAL error)
		})
	}
}

// TestFatalCommitErrorConcurrent: writers committing together when the WAL
// fails all get an error or were acknowledged before it: none hangs, and
// none is told its write worked after the failure was recorded.
func TestFatalCommitErrorConcurrent(t *testing.T) {
	inj := enospcOnWAL()
	s, err := Open(Options{InMemory: true, fs: errorfs.Wrap(vfs.NewMem(), inj)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const writers = 8
	var (
		wg      sync.WaitGroup
		acked   atomic.Int64
		started = make(chan struct{})
		once    sync.Once
	)
	errs := make([]error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				if err := s.Put([]byte(fmt.Sprintf("%d/%d", w, i)), []byte("v")); err != nil {
					errs[w] = err
					return
				}
				if acked.Add(1) == writers*20 {
					once.Do(func() { close(started) })
				}
			}
		}()
	}
	<-started // every writer keeps writing until it fails
	inj.On()
	wg.Wait()
	for w, err := range errs {
		if !errors.Is(err, ErrFailed) {
			t.Errorf("writer %d: %v, want ErrFailed", w, err)
		}
	}
}

// TestFlushRetriesBackOff: Pebble retries a failed flush at once and for
// ever; on a full disk that spun at full CPU with an error line per try
// (thousands a second). Each ENOSPC now pauses Pebble's writes, 10 ms
// doubling to 1 s, so the tries that fit in the time the test took are
// bounded by the back-off, however fast or slow the machine.
func TestFlushRetriesBackOff(t *testing.T) {
	var tries atomic.Int64
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst") {
			tries.Add(1)
			return syscall.ENOSPC
		}
		return nil
	})}
	core, logs := observer.New(zap.DebugLevel)
	s, err := Open(Options{InMemory: true, fs: errorfs.Wrap(vfs.NewMem(), full), Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	full.On()
	start := time.Now()
	flushed, err := s.db.AsyncFlush()
	if err != nil {
		t.Fatal(err)
	}
	for tries.Load() < 8 { // progress: the flush is retried
		time.Sleep(time.Millisecond)
	}
	n, elapsed := tries.Load(), time.Since(start)
	full.Off()
	<-flushed // and succeeds once there is room

	// Each try creates the file twice (vfs.OnDiskFull retries once after
	// the pause); the pauses that fit in elapsed bound the tries.
	pauses, slept := 0, time.Duration(0)
	for pause := enospcMinBackoff; slept+pause <= elapsed; pause = min(2*pause, enospcMaxBackoff) {
		slept += pause
		pauses++
	}
	if max := int64(2 * (pauses + 2)); n > max {
		t.Fatalf("%d flush tries in %v; the back-off allows at most %d", n, elapsed, max)
	}
	t.Logf("%d tries in %v", n, elapsed)
	// And their error lines are rate-limited.
	lines := logs.FilterLevelExact(zap.ErrorLevel).Len()
	if max := 1 + int(time.Since(start)/errorLogInterval); lines < 1 || lines > max {
		t.Fatalf("%d error lines for %d failed flushes, want 1 to %d", lines, n, max)
	}
	if v, ok := mustGet(t, s, "k"); !ok || v != "v" {
		t.Fatalf("after the flush: %q, %v", v, ok)
	}
}

// TestPebbleErrorsRateLimitedApart: one error repeated is logged once per
// interval with the count it hid; another error still gets its line.
func TestPebbleErrorsRateLimitedApart(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	p := newPebbleLogger(zap.New(core), &failure{})
	start := time.Now()
	for range 100 {
		p.Errorf("background error: %s", "no space left on device")
	}
	p.Errorf("other error: %d", 7)
	repeats := logs.FilterMessageSnippet("background error").Len()
	if max := 1 + int(time.Since(start)/errorLogInterval); repeats < 1 || repeats > max {
		t.Fatalf("%d lines for 100 repeats of one error, want 1 to %d", repeats, max)
	}
	if logs.FilterMessage("other error: 7").Len() != 1 {
		t.Fatalf("the other error was not logged: %v", logs.All())
	}
}
