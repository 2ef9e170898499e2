package rpc

import (
	"errors"

	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
)

// Flow control's parts (the stream's inbox and credit, the connection
// window) are the connection layer's (package conn); a stream's initial
// window is conn.DefaultWindow.
const defaultWindow = conn.DefaultWindow

// Defaults for what a connection buffers for streams nobody reads.
const (
	defaultConnWindow           = 16 << 20
	maxAutoWindow               = 4 << 20 // how far a stream's window grows by itself
	defaultMaxConcurrentStreams = 4096
)

// errPastConnWindow is the connection error for a peer that sent past the
// connection's window.
var errPastConnWindow = errors.New("flow control: the peer sent past the connection's window")
