//go:build !linux

package tcp

import "net"

// direct is Linux's inline write (trywrite_linux.go); elsewhere every frame
// goes through the writer goroutine.
type direct struct{}

func newDirect(net.Conn) *direct { return nil }

func (*direct) write(hdr, b []byte) int { return 0 }
