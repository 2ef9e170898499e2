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

type peerKey struct{}

// PeerFromContext returns the client a server handler is serving.
func PeerFromContext(ctx context.Context) (*Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(*Peer)
	return p, ok
}
