package tcp

import (
	"net"
	"syscall"
	"unsafe"
)

// maxIovecs is what one writev takes at most (Linux's IOV_MAX).
const maxIovecs = 1024

// direct writes to a socket without blocking, from whichever goroutine
// holds the writer's role; what the socket does not take at once is left
// for the writer goroutine, which may block. nil for connections that are
// not sockets (TLS, pipes): those are written by the writer goroutine only.
type direct struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // d.writev, bound once: a method value per call would be garbage
	iov []syscall.Iovec
	n   int   // writev's result, for fn's caller
	err error // writev's error, EAGAIN included
}

func newDirect(nc net.Conn) *direct {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil // a wrapper that may not write the fd's bytes verbatim
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	d := &direct{rc: rc, iov: make([]syscall.Iovec, 0, 16)}
	d.fn = d.writev
	return d
}

// write writes what it can of bufs (up to maxIovecs of them) without
// waiting for the socket: n bytes from the start, and wouldBlock when the
// socket took less than it was offered.
// A non-nil error is the socket's; the connection is broken.
func (d *direct) write(bufs net.Buffers) (n int, wouldBlock bool, err error) {
	d.iov = d.iov[:0]
	want := 0
	for _, b := range bufs {
		if len(d.iov) == maxIovecs {
			break
		}
		if len(b) == 0 {
			continue
		}
		v := syscall.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		d.iov = append(d.iov, v)
		want += len(b)
	}
	if len(d.iov) == 0 {
		return 0, false, nil
	}
	d.n, d.err = 0, nil
	if err := d.rc.Write(d.fn); err != nil {
		clear(d.iov)
		return 0, false, err // closed, or past the write deadline
	}
	clear(d.iov) // keep no pointers into frames already given back
	switch d.err {
	case nil:
		return d.n, d.n < want, nil
	case syscall.EAGAIN:
		return 0, true, nil
	default:
		return 0, false, d.err
	}
}

// writev is one non-blocking writev on fd; it never asks the poller to
// wait (true: done), so the calling goroutine never blocks.
func (d *direct) writev(fd uintptr) bool {
	for {
		n, _, errno := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&d.iov[0])), uintptr(len(d.iov)))
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			d.err = errno
			return true
		}
		d.n = int(n)
		return true
	}
}

// inq tells the read role's holder whether the socket holds bytes not
// read yet (SIOCINQ). Its own state, apart from direct's, which is the
// writer's.
type inq struct {
	rc syscall.RawConn
	fn func(fd uintptr) // i.ioctl, bound once: a closure per look would be garbage
	n  int32
}

func newInq(d *direct) *inq {
	if d == nil {
		return nil
	}
	i := &inq{rc: d.rc}
	i.fn = i.ioctl
	return i
}

func (i *inq) ioctl(fd uintptr) {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&i.n))); errno != 0 {
		i.n = 1
	}
}

// unread reports whether a frame is already coming: the socket holds
// bytes not read yet. True when it cannot tell.
func (i *inq) unread() bool {
	i.n = 1
	if i.rc.Control(i.fn) != nil {
		return true
	}
	return i.n > 0
}
