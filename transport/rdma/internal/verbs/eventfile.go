//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// eventFile waits until a verbs event fd (a completion channel's or a
// context's async fd) is readable through Go's netpoller, so a goroutine
// waiting for an event never holds an OS thread in C.
//
// The verbs fd is switched to O_NONBLOCK (the verbs then return EAGAIN
// instead of blocking) and duplicated; the duplicate belongs to an *os.File
// registered with the netpoller. The verbs library keeps and eventually
// closes the original.
type eventFile struct {
	turn   chan struct{} // a token: one waiter at a time, the read deadline belongs to the file
	f      *os.File
	rc     syscall.RawConn
	closed atomic.Bool // close was called (the poller's "use of closed file" is not exported)
	woken  atomic.Bool // wake was called and no wait has returned for it yet

	// The turn holder's try, and read, the callback handed to the raw
	// conn, built once: a closure made per wait would escape to the heap
	// (the completion channel's poller waits several times per message).
	try  func() bool
	read func(uintptr) bool
}

func newEventFile(fd C.int, name string) (*eventFile, error) {
	dup, err := C.rr_nonblock_dup(fd)
	if dup < 0 {
		return nil, verbError("set "+name+" fd non-blocking", err)
	}
	f := os.NewFile(uintptr(dup), name)
	// SetReadDeadline fails unless the netpoller took the fd: then waiting
	// would need a blocked thread, which this package promises never to do.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("rdma: %s fd cannot be polled: %w", name, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("rdma: %s fd: %w", name, err)
	}
	return newEventFileOf(f, rc), nil
}

// newEventFileOf makes the eventFile of f, an fd the netpoller took, and
// rc, its raw conn.
func newEventFileOf(f *os.File, rc syscall.RawConn) *eventFile {
	e := &eventFile{f: f, rc: rc, turn: make(chan struct{}, 1)}
	e.read = func(uintptr) bool { return e.try() }
	return e
}

// wait calls try whenever the fd may be readable (and once at once) until
// try reports true. It gives up with ctx's error when ctx is done and with
// an error wrapping ErrClosed when close is called.
func (e *eventFile) wait(ctx context.Context, try func() bool) error {
	if err := e.takeTurn(ctx); err != nil {
		return err
	}
	defer e.endTurn()
	return e.waitTurn(ctx, try)
}

// takeTurn waits for the turn to wait (one waiter at a time), or ctx's end.
func (e *eventFile) takeTurn(ctx context.Context) error {
	select {
	case e.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *eventFile) endTurn() { <-e.turn }

// waitTurn is wait, for the holder of the turn. It allocates nothing when
// ctx cannot be cancelled and try is a func value made beforehand.
func (e *eventFile) waitTurn(ctx context.Context, try func() bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Clear the past deadline an earlier cancelled wait (or wake) may have
	// left; a wake that came first is seen below, one that comes after
	// sets its deadline after this.
	if err := e.f.SetReadDeadline(time.Time{}); err != nil {
		return e.mapErr(ctx, err)
	}
	if e.woken.Swap(false) {
		return ErrWoken
	}
	if ctx.Done() != nil {
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			defer close(fired)
			e.f.SetReadDeadline(time.Unix(1, 0)) // wakes the netpoller wait below
		})
		defer func() {
			if !stop() {
				<-fired // so it cannot run during a later wait
			}
		}()
	}
	e.try = try
	err := e.rc.Read(e.read)
	e.try = nil
	return e.mapErr(ctx, err)
}

func (e *eventFile) mapErr(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case e.closed.Load():
		return fmt.Errorf("rdma: %s: %w", e.f.Name(), ErrClosed)
	case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded) && e.woken.Swap(false):
		return ErrWoken
	}
	return fmt.Errorf("rdma: wait on %s: %w", e.f.Name(), err)
}

// wake makes the wait in progress, or else the next one, return ErrWoken:
// a waiter with no context to cancel (which would cost an allocation per
// wait) is stopped this way.
func (e *eventFile) wake() {
	e.woken.Store(true)
	e.f.SetReadDeadline(time.Unix(1, 0))
}

// close wakes a waiter (with ErrClosed) and returns once no try call is
// running, after which the verbs object behind the fd may be destroyed.
// It must not wait for the turn token: a waiter holds it.
func (e *eventFile) close() error {
	e.closed.Store(true)
	return e.f.Close()
}
