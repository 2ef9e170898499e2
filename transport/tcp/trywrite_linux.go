package tcp

import (
	"net"
	"syscall"
	"unsafe"
)

// direct writes frames from the sender's goroutine while the writer is
// idle: one non-blocking writev, whose unwritten rest (if the socket
// buffer is full) goes to the writer goroutine. A frame that fits the
// socket buffer then costs no wake-up of the writer. Its fields are
// guarded by conn.wmu; fn is made once so that a write allocates nothing.
type direct struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool
	iov [2]syscall.Iovec
	cnt int
	n   int // the last write's bytes, or -1
}

func newDirect(nc net.Conn) *direct {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil // TLS, net.Pipe: the writer goroutine only
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	d := &direct{rc: rc}
	d.fn = func(fd uintptr) bool {
		n, _, errno := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&d.iov[0])), uintptr(d.cnt))
		if errno != 0 {
			d.n = -1 // EAGAIN or a failure the writer will meet and report
		} else {
			d.n = int(n)
		}
		return true // never wait for the socket: the writer does that
	}
	return d
}

// write writes as much of hdr and b as the socket takes now, without
// waiting, and returns how many bytes that was (0 when none, or on an
// error the writer goroutine will report).
func (d *direct) write(hdr, b []byte) int {
	d.iov[0] = syscall.Iovec{Base: &hdr[0]}
	d.iov[0].SetLen(len(hdr))
	d.cnt = 1
	if len(b) > 0 {
		d.iov[1] = syscall.Iovec{Base: &b[0]}
		d.iov[1].SetLen(len(b))
		d.cnt = 2
	}
	d.n = -1
	err := d.rc.Write(d.fn)
	d.iov = [2]syscall.Iovec{} // keep no pointer to the buffers
	if err != nil || d.n < 0 {
		return 0
	}
	return d.n
}
