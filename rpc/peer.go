package rpc

import (
	"context"
	"net"
)

// Peer is the other end of a call.
type Peer struct {
	Addr      net.Addr
	LocalAddr net.Addr
}

// PeerFromContext returns the client a server handler is serving.
func PeerFromContext(ctx context.Context) (*Peer, bool) {
	c, err := callFromContext(ctx)
	if err != nil {
		return nil, false
	}
	return c.peer, true
}
