// Package backoff holds the delays a ClientConn waits between failed
// connection attempts: gRPC's connection backoff (base 1 s, multiplier 1.6,
// jitter 0.2, at most 120 s), with gRPC-go's names. It knows nothing about
// connections.
package backoff
