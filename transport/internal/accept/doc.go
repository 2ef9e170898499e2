// Package accept is the listener the stream-bootstrapped transports share:
// it accepts sockets in a goroutine of its own, runs each one's handshake
// in a goroutine of its own (so a slow or hostile peer holds up nobody),
// logs one line per refused peer, and hands handshaken connections to
// Accept. Close stops it all and waits.
//
// It knows the transport contract and net.Listener, and nothing of any
// transport's handshake or wire format.
package accept
