package verbs

import (
	"errors"
	"fmt"
	"syscall"
)

var (
	// ErrNotSupported is wrapped by every constructor (and Devices) when
	// there is no RDMA support: a build without Linux or cgo, a build
	// without libibverbs' headers, or a machine without libibverbs.
	ErrNotSupported = errors.New("rdma: RDMA not supported in this build (needs linux and cgo)")

	// ErrClosed is wrapped by the error of any call on an object that has
	// been closed (or whose Close is under way).
	ErrClosed = errors.New("rdma: use of closed verbs object")

	// ErrWoken is what CompChannel.Wait returns when CompChannel.Wake
	// stopped it.
	ErrWoken = errors.New("rdma: completion channel wait woken")

	// ErrQPState is wrapped when a post or transition is not allowed in the
	// QP's current state (for instance posting a send before RTS).
	ErrQPState = errors.New("rdma: operation not allowed in this QP state")
)

// unsupported is an error that matches ErrNotSupported and says, in its
// own words, why and what to install.
type unsupported string

func (e unsupported) Error() string        { return string(e) }
func (e unsupported) Is(target error) bool { return target == ErrNotSupported }

// closedError names the kind of object that was closed.
func closedError(what string) error { return fmt.Errorf("rdma: %s: %w", what, ErrClosed) }

// Preallocated so that the data path never allocates to report a closed object.
var (
	errQPClosed  = closedError("QP")
	errCQClosed  = closedError("CQ")
	errMRClosed  = closedError("MR")
	errSRQClosed = closedError("SRQ")
)

// verbError reports a failed verb. errno is what the verb returned or left in
// errno; the result wraps it (errors.Is(err, syscall.ENOMEM) works) and is
// prefixed by the verb's name.
func verbError(verb string, errno error) error {
	var e syscall.Errno
	if errors.As(errno, &e) && e != 0 {
		return fmt.Errorf("rdma: %s: %w", verb, e)
	}
	// Some providers return NULL without setting errno.
	return fmt.Errorf("rdma: %s failed (no errno reported)", verb)
}

// busyError reports a Close refused because n dependent objects are open.
func busyError(what string, n int64, deps string) error {
	return fmt.Errorf("rdma: close %s: %d dependent object(s) still open (close %s first): %w",
		what, n, deps, syscall.EBUSY)
}

// PostError reports a PostSend or PostRecv that did not post the whole
// batch. Work requests before Posted were handed to the device (and will
// complete, successfully or flushed); the others were not.
//
// Requests are validated in Go before anything is posted: a malformed
// request (range outside its MR, inline data too long, closed MR) fails the
// whole batch with Posted == 0. A failure of the verb itself reports the
// errno and Posted == Index, the request the provider refused.
type PostError struct {
	Op     string // "ibv_post_send" or "ibv_post_recv"
	Index  int    // the work request that failed
	Posted int    // how many work requests, from the start, were posted
	Err    error  // a syscall.Errno, ErrClosed, ErrQPState or a validation error
}

func (e *PostError) Error() string {
	return fmt.Sprintf("rdma: %s: work request %d: %v (%d posted)", e.Op, e.Index, e.Err, e.Posted)
}

func (e *PostError) Unwrap() error { return e.Err }

// rcError reports a verb that returned rc != 0. Verbs disagree on how they
// report failure: most return the errno value, some return -1 and set errno
// (captured by cgo's two-value call form as errno).
func rcError(verb string, rc int, errno error) error {
	if rc > 0 {
		return verbError(verb, syscall.Errno(rc))
	}
	return verbError(verb, errno)
}
