package peer

import (
	"context"
	"net"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/internal/ctxkey"
)

// Peer is the other end of a call.
type Peer struct {
	// Addr is the peer's address.
	Addr net.Addr
	// LocalAddr is this end's address of the connection.
	LocalAddr net.Addr
	// AuthInfo is what the transport credentials' handshake learned about
	// the peer (credentials.TLSInfo for TLS); nil when the connection has
	// no transport credentials.
	AuthInfo credentials.AuthInfo
}

type peerKey = ctxkey.Peer // the rpc server answers it too

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

// FromContext returns the Peer in ctx: in a server handler, the client it
// serves.
func FromContext(ctx context.Context) (*Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(*Peer)
	return p, ok
}
