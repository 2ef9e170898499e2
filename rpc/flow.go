package rpc

import (
	"errors"

	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
)

// Flow control's parts (the stream's inbox and credit, the connection
// window) are the connection layer's (package conn); a stream's initial
// window is conn.DefaultWindow.
const defaultWindow = conn.DefaultWindow

// Defaults for what a connection buffers for streams nobody reads.
const (
	defaultConnWindow           = 16 << 20
	defaultMaxConcurrentStreams = 4096
)

// connFree gives cost bytes of the connection window back to the peer,
// once a batch is due.
func (l *link) connFree(cost int) {
	if grant := l.flow.Free(cost); grant > 0 && !l.queueControl(wire.AppendWindow(nil, conn.ConnStream, uint32(grant)), maxQueuedCancels) {
		l.flow.Ungrant(grant)
	}
}

// connWindowUpdate takes a WINDOW_UPDATE for stream 0.
func (l *link) connWindowUpdate(body []byte) error {
	n, err := wire.ParseWindow(body)
	if err != nil {
		return err
	}
	if !l.flow.Add(int64(n)) {
		return errors.New("flow control: connection window updates past 2^31-1 bytes")
	}
	return nil
}

// errPastConnWindow is the connection error for a peer that sent past the
// connection's window.
var errPastConnWindow = errors.New("flow control: the peer sent past the connection's window")
