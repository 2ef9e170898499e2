package rpc

import (
	"context"

	"github.com/rdmarpc/rdmarpc/peer"
)

// Peer is the other end of a call (see package peer).
type Peer = peer.Peer

// PeerFromContext returns the client a server handler is serving; it is
// peer.FromContext.
func PeerFromContext(ctx context.Context) (*Peer, bool) { return peer.FromContext(ctx) }
