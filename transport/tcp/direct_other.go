//go:build !linux

package tcp

import "net"

// direct is Linux-only; elsewhere the writer goroutine writes every frame.
type direct struct{}

func newDirect(net.Conn) *direct { return nil }

func (*direct) write(net.Buffers) (int, bool, error) { panic("tcp: no direct writes on this platform") }

// inq is Linux-only; elsewhere a large frame is always read ahead.
type inq struct{}

func newInq(*direct) *inq { return nil }

func (*inq) unread() bool { return true }
