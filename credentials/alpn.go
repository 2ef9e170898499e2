package credentials

import "slices"

// NextProtosCredentials is implemented by transport credentials whose
// handshake negotiates the application protocol (TLS's ALPN). A client of
// another protocol than rdmarpc's own framing dials through it: the gRPC
// protocol over HTTP/2 (grpc:// targets) offers "h2", which gRPC servers
// require, instead of "rdmarpc".
type NextProtosCredentials interface {
	TransportCredentials
	// WithNextProtos returns credentials like these that offer protos,
	// in order of preference, and nothing else.
	WithNextProtos(protos ...string) TransportCredentials
}

// WithNextProtos returns TLS credentials of the same configuration that
// offer protos through ALPN.
func (c *tlsCreds) WithNextProtos(protos ...string) TransportCredentials {
	cfg := c.config.Clone()
	cfg.NextProtos = slices.Clone(protos)
	return &tlsCreds{config: cfg}
}
