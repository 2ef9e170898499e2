package rpc

import (
	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/transport"
)

// A stream's MESSAGE waits in the stream's inbox, until RecvMsg decodes
// it, as the body of its frame, frame[wire.HeaderLen:], in memory of its
// own: the frame's, detached from the transport when it lets it go
// (tcp://: no copy, and its receive budget back at once), else a pooled
// copy of the frame. Either way the memory goes back to the pool, whole,
// with putMessage.

// takeMessage is the body of frame, a MESSAGE, in memory of its own; the
// frame is empty afterwards or still to be released.
func takeMessage(frame *transport.Buffer) []byte {
	if frame.Len() > wire.HeaderLen {
		if data, ok := frame.Detach(); ok {
			return data[wire.HeaderLen:]
		}
	}
	msg := bufpool.Get(frame.Len())
	copy(msg, frame.Bytes())
	return msg[wire.HeaderLen:]
}

// putMessage gives back the memory of a message from takeMessage.
func putMessage(msg []byte) { bufpool.PutTail(msg, wire.HeaderLen) }
