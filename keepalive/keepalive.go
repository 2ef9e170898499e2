package keepalive

import "time"

// ClientParameters say how a client pings a quiet connection.
type ClientParameters struct {
	// Time of silence from the server after which the client pings.
	// Default 30 s (rdmarpc's; gRPC-go's is off); a server's
	// EnforcementPolicy.MinTime above it makes the server send GOAWAY
	// "too_many_pings", after which the client doubles it.
	Time time.Duration
	// Timeout for a sign of life after the ping, after which the
	// connection is closed. Default 20 s.
	Timeout time.Duration
	// PermitWithoutStream is accepted for gRPC-go's sake; an rdmarpc
	// client pings whenever the connection is quiet, calls or not.
	PermitWithoutStream bool
}

// ServerParameters say how a server pings quiet clients and how long it
// keeps a connection.
type ServerParameters struct {
	// MaxConnectionIdle: a connection without calls or streams for this
	// long gets GOAWAY, and its client closes it. Zero: no limit.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge: a connection this old (±10 %, so a fleet's
	// connections do not all go at once) gets GOAWAY, so clients reconnect,
	// perhaps to another server after a scale-up. Zero: no limit.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace: after the GOAWAY of MaxConnectionAge or
	// MaxConnectionIdle, how long calls in progress may run before the
	// connection is closed. Zero: until they end.
	MaxConnectionAgeGrace time.Duration
	// Time of silence from the client after which the server pings.
	// Default 30 s; negative: off.
	Time time.Duration
	// Timeout for a sign of life after the ping. Default 20 s.
	Timeout time.Duration
}

// EnforcementPolicy is how often a server lets clients ping. A client that
// pings more often gets GOAWAY "too_many_pings" and its connection is
// closed, as in gRPC-go.
type EnforcementPolicy struct {
	// MinTime is the least time between two pings of a client. gRPC-go's
	// default is 5 minutes; rdmarpc enforces nothing without the option,
	// since its clients ping every 30 s by default.
	MinTime time.Duration
	// PermitWithoutStream lets a client ping while it has no call or
	// stream open; without it such pings are strikes whatever their
	// interval.
	PermitWithoutStream bool
}
