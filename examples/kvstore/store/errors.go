package store

import (
	"errors"
	"fmt"
)

// Limits of what one call may write, checked before anything is written.
const (
	// MaxKeySize is the longest key, in bytes. Keys are at least one byte.
	MaxKeySize = 4096
	// MaxValueSize is the longest value, in bytes.
	MaxValueSize = 1 << 20
	// MaxBatchMutations is the most mutations one Batch may hold.
	MaxBatchMutations = 10000
)

var (
	// ErrInvalid matches (errors.Is) the errors about arguments the store
	// refuses: empty or oversized keys, oversized values or batches.
	// Nothing was written.
	ErrInvalid = errors.New("invalid argument")

	// ErrClosed is returned by calls on a closed store.
	ErrClosed = errors.New("store: closed")

	// ErrForeignDir is wrapped when the data directory holds files but no
	// KVSTORE marker: it belongs to someone else, and Open touched nothing.
	ErrForeignDir = errors.New("not a kvstore data directory")

	// ErrDirInUse is wrapped when another process (or another Store of
	// this one) has the data directory open.
	ErrDirInUse = errors.New("data directory in use by another process")

	// ErrCorruptDir is wrapped when the data directory has a marker but
	// the marker or Pebble's files cannot be read. Open touched nothing.
	ErrCorruptDir = errors.New("corrupt kvstore data directory")

	// ErrFailed is wrapped by the errors of writes after a fatal storage
	// error (a write-ahead log that could not be written or synced): the
	// store serves reads but refuses writes until it is opened again. A
	// write that fails this way may or may not have been applied.
	ErrFailed = errors.New("storage failed")

	// ErrDiskFull is wrapped by *DiskFullError.
	ErrDiskFull = errors.New("disk full")
)

// DiskFullError refuses a write because the data directory's file system
// has less free space than the store keeps (Options.MinFreeBytes): nothing
// was written. Writes are accepted again once space is freed.
type DiskFullError struct {
	Dir  string // the data directory
	Free uint64 // bytes free for the store, as far as it knows
	Need uint64 // bytes it needs free to accept the write: the threshold plus the write
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("disk full: %d bytes free in %s, need %d", e.Free, e.Dir, e.Need)
}

func (e *DiskFullError) Is(target error) bool { return target == ErrDiskFull }

// invalidError is an ErrInvalid whose message says what is wrong alone
// ("empty key"), since whoever reports it names the kind already.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, a ...any) error { return &invalidError{fmt.Sprintf(format, a...)} }

// ConflictError is returned by CompareAndSwap when the key does not meet
// the expectation. Nothing was written.
type ConflictError struct {
	Found   bool   // whether the key exists
	Current []byte // its value, when it exists

	expectedAbsent bool
}

func (e *ConflictError) Error() string {
	switch {
	case !e.Found:
		return "compare-and-swap conflict: the key does not exist"
	case e.expectedAbsent:
		return "compare-and-swap conflict: the key exists"
	default:
		return "compare-and-swap conflict: the key holds a different value"
	}
}

func checkKey(key []byte) error {
	switch {
	case len(key) == 0:
		return invalid("empty key")
	case len(key) > MaxKeySize:
		return invalid("key of %d bytes is longer than the limit (%d)", len(key), MaxKeySize)
	}
	return nil
}

func checkValue(value []byte) error {
	if len(value) > MaxValueSize {
		return invalid("value of %d bytes is longer than the limit (%d)", len(value), MaxValueSize)
	}
	return nil
}
