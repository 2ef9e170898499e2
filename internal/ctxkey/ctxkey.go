package ctxkey

// IncomingMD is the key of a server call's incoming metadata.MD.
type IncomingMD struct{}

// Peer is the key of a call's *peer.Peer.
type Peer struct{}
